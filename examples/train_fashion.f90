! train_fashion.f90: the Fortran counterpart of train_fashion.c, driving
! the training loop itself as a simulation code would: its own MPI_Init,
! a cltrain communicator from MPI_COMM_WORLD's Fortran handle, a model
! spec, and clt_trainer_step on batches it takes from the Fashion-MNIST
! files (through the library's IDX reader), each rank its own share of
! every global batch; then the test accuracy of its predictions, and the
! loss and accuracy on the whole test set from clt_trainer_evaluate (every
! rank's replica taking its part). The options are clt_options_t's
! components, every field of the C library's clt_train_options
! (opts%zero, opts%precision, opts%metrics_path, opts%callback, ...; see
! libcltrain(3)); clt_trainer_fit runs the library's own loop over
! datasets instead of this one.
!
!   gfortran train_fashion.f90 $(pkg-config --cflags --libs cltrain-fortran) -o train_fashion_f
!   mpirun -np 2 ./train_fashion_f fashion_mlp.model [DATA_DIR [STEPS]]
program train_fashion
  use, intrinsic :: iso_c_binding
  use mpi
  use cltrain
  implicit none

  integer(c_int64_t), parameter :: global_batch = 128, test_samples = 2000
  character(len=512) :: spec_path, dir, arg
  type(clt_comm_t) :: comm
  type(clt_devices_t) :: alldevs, mine
  type(clt_model_t) :: model
  type(clt_dataset_t) :: train, test
  type(clt_trainer_t) :: trainer
  type(clt_options_t) :: opts
  type(clt_step_result_t) :: res
  real(c_float), allocatable :: x(:, :), logits(:, :)
  integer(c_int32_t), allocatable :: y(:)
  integer(c_int64_t), allocatable :: idx(:)
  real(c_float) :: mean, std
  real(c_double) :: test_loss, test_accuracy
  integer(c_int64_t) :: count, share, first, step, steps, j, correct, total
  integer :: ierr, provided, rank, nranks, d
  character(len=16) :: one

  call MPI_Init_thread(MPI_THREAD_FUNNELED, provided, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  spec_path = 'fashion_mlp.model'
  dir = '/usr/share/datasets/fashion-mnist'
  steps = 300
  if (command_argument_count() >= 1) call get_command_argument(1, spec_path)
  if (command_argument_count() >= 2) call get_command_argument(2, dir)
  if (command_argument_count() >= 3) then
     call get_command_argument(3, arg)
     read (arg, *) steps
  end if

  ! The communicator: the library's copy of the program's MPI_COMM_WORLD (a
  ! library built without MPI says so, and this process trains alone).
  call try(clt_comm_create(MPI_COMM_WORLD, comm), 'communicator', CLT_EUNSUPPORTED)
  if (.not. c_associated(comm%p)) call try(clt_comm_create_local(comm), 'communicator')
  ! One device per rank, chosen by the rank's place on its node.
  call try(clt_devices_discover(alldevs), 'devices')
  d = clt_comm_default_device(comm, alldevs)
  if (d < 0) call try(d, 'devices')
  write (one, '(i0)') d
  call try(clt_devices_select(alldevs, one, mine), 'devices')
  print '(a, i0, a, a)', 'rank ', rank, ': ', clt_device_name(mine, 0)

  call try(clt_model_load(spec_path, model), trim(spec_path))
  call try(clt_dataset_open_idx(dir, 'train', train), trim(dir))
  call try(clt_dataset_open_idx(dir, 'test', test), trim(dir))
  call try(clt_dataset_stats(train, mean, std), 'statistics')
  call try(clt_dataset_normalize(train, mean, std), 'normalisation')
  call try(clt_dataset_normalize(test, mean, std), 'normalisation')

  call clt_options_default(opts)
  opts%batch = global_batch ! the global batch: every rank's share together
  opts%lr = 0.02
  opts%clip = 5 ! global-norm gradient clipping
  call try(clt_trainer_create(model, mine, comm, opts, trainer), 'trainer')

  ! This rank's share of each global batch: the ranks split it in turn.
  share = global_batch / nranks
  if (rank < mod(global_batch, int(nranks, c_int64_t))) share = share + 1
  first = rank * (global_batch / nranks) + min(int(rank, c_int64_t), mod(global_batch, int(nranks, c_int64_t)))
  count = clt_dataset_count(train)
  allocate (x(clt_dataset_sample_size(train), share), y(share), idx(share))
  do step = 0, steps - 1
     ! global batch `step` is samples step*B .. step*B + B - 1 (mod count)
     ! of a fixed stride through the set, which mixes the classes
     do j = 1, share
        idx(j) = mod((step * global_batch + first + j - 1) * 7919_c_int64_t, count)
     end do
     call try(clt_dataset_get_batch(train, idx, x, y), 'batch')
     call try(clt_trainer_step(trainer, x, y, res), 'step')
     if (rank == 0 .and. (mod(step + 1, 25) == 0 .or. step == 0)) &
          print '(a, i5, a, f7.4, a, f6.3)', 'step ', step + 1, ': loss ', res%loss, ', batch accuracy ', res%accuracy
  end do

  ! Test accuracy of this rank's predictions on the first test samples.
  total = min(test_samples, clt_dataset_count(test))
  deallocate (x, y, idx)
  allocate (x(clt_dataset_sample_size(test), total), y(total), idx(total), logits(clt_trainer_outputs(trainer), total))
  idx = [(j, j = 0, total - 1)]
  call try(clt_dataset_get_batch(test, idx, x, y), 'test batch')
  call try(clt_trainer_predict(trainer, x, logits), 'predict')
  correct = 0
  do j = 1, total
     if (maxloc(logits(:, j), 1) - 1 == y(j)) correct = correct + 1
  end do
  if (rank == 0) print '(a, i0, a, f6.4)', 'test accuracy on ', total, ' samples: ', real(correct) / real(total)
  ! The whole test set, split across the ranks (collective).
  call try(clt_trainer_evaluate(trainer, test, test_loss, test_accuracy), 'evaluate')
  if (rank == 0) print '(a, i0, a, f7.4, a, f6.4)', 'evaluate on all ', clt_dataset_count(test), &
       ' test samples: loss ', test_loss, ', accuracy ', test_accuracy

  call clt_trainer_destroy(trainer)
  call clt_dataset_destroy(train)
  call clt_dataset_destroy(test)
  call clt_model_destroy(model)
  call clt_devices_destroy(mine)
  call clt_devices_destroy(alldevs)
  call clt_comm_destroy(comm)
  call MPI_Finalize(ierr)

contains

  ! Give up, with the library's account of what failed, unless rc is CLT_OK
  ! (or `allowed`).
  subroutine try(rc, what, allowed)
    integer(c_int), intent(in) :: rc
    character(len=*), intent(in) :: what
    integer(c_int), intent(in), optional :: allowed
    integer :: e
    if (rc >= 0) return
    if (present(allowed)) then
       if (rc == allowed) return
    end if
    write (0, '(a)') 'train_fashion: ' // what // ': ' // clt_status_name(rc) // ': ' // clt_error_message()
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine try

end program train_fashion
