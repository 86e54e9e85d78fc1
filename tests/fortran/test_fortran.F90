! test_fortran.F90: the Fortran module (use cltrain) end to end, on 1 or
! more MPI ranks (tests/fortran/fortran.sh): devices, a communicator from
! MPI_COMM_WORLD's Fortran handle (or this process alone, built without
! MPI's Fortran module), a model from a spec string, a trainer, steps whose
! loss falls, predict's shape, weights and checkpoints round trips bit for
! bit, and bad input: an invalid communicator handle, a bad spec, arrays of
! the wrong shape, handles never made, an empty path, each a non-zero
! status and a message naming it (or, for a function that returns a value,
! the value a handle never made gives: 0).
! Exits 77 (skipped) without an OpenCL device.
program test_fortran
  use, intrinsic :: iso_c_binding
  use, intrinsic :: ieee_arithmetic, only: ieee_is_finite
  use cltrain
#ifdef CLT_TEST_MPI
  use mpi
#endif
  implicit none

  integer, parameter :: nfeat = 4, nclass = 3, nlocal = 32
  character(len=*), parameter :: weights = 'test_fortran_weights.safetensors'
  character(len=*), parameter :: ckpt = 'test_fortran_ckpt.safetensors'
  character(len=1), parameter :: nl = new_line('a')
  type(clt_devices_t) :: alldevs, mine, nodevs
  type(clt_comm_t) :: comm, bad
  type(clt_model_t) :: model, badmodel, nomodel
  type(clt_trainer_t) :: trainer, never, reg
  type(clt_comm_t) :: nocomm
  type(clt_dataset_t) :: nods
  real(c_float) :: pnever(20), mean, std
  type(clt_model_t) :: regmodel
  real(c_float) :: tg(2, nlocal), tg_bad(3, nlocal), pout(2, nlocal)
  type(clt_options_t) :: opts
  type(clt_step_result_t) :: res
  real(c_float) :: x(nfeat, nlocal), x5(nfeat + 1, nlocal), out(nclass, nlocal), out2(nclass - 1, nlocal)
  integer(c_int32_t) :: y(nlocal), yshort(nlocal - 1)
  real(c_float), allocatable :: p1(:), p2(:), p3(:), q1(:), q2(:)
  real(c_double) :: first_loss, last_loss, loss, loss_a, loss_b
  integer(c_int) :: rc
  integer :: rank, nranks, i, d, failures, correct
  integer(c_int64_t) :: steps_at_ckpt, np
  character(len=16) :: spec
  character(len=:), allocatable :: msg
#ifdef CLT_TEST_MPI
  integer :: ierr, provided
#endif

  failures = 0
  rank = 0
  nranks = 1
#ifdef CLT_TEST_MPI
  call MPI_Init_thread(MPI_THREAD_FUNNELED, provided, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
#endif

  ! ---- status codes: the module's constants are the library's
  call check(clt_status_name(CLT_OK) == 'CLT_OK', 'CLT_OK')
  call check(clt_status_name(CLT_EINVAL) == 'CLT_EINVAL' .and. clt_status_name(CLT_ENOMEM) == 'CLT_ENOMEM' .and. &
       clt_status_name(CLT_ENOICD) == 'CLT_ENOICD' .and. clt_status_name(CLT_ENODEV) == 'CLT_ENODEV' .and. &
       clt_status_name(CLT_ENOMATCH) == 'CLT_ENOMATCH' .and. clt_status_name(CLT_ECL) == 'CLT_ECL' .and. &
       clt_status_name(CLT_EBUILD) == 'CLT_EBUILD' .and. clt_status_name(CLT_EDEVMEM) == 'CLT_EDEVMEM' .and. &
       clt_status_name(CLT_EUNSUPPORTED) == 'CLT_EUNSUPPORTED' .and. clt_status_name(CLT_ESHAPE) == 'CLT_ESHAPE' &
       .and. clt_status_name(CLT_EBLAS) == 'CLT_EBLAS' .and. clt_status_name(CLT_EMPI) == 'CLT_EMPI' .and. &
       clt_status_name(CLT_ETIMEDOUT) == 'CLT_ETIMEDOUT' .and. clt_status_name(CLT_EMISMATCH) == 'CLT_EMISMATCH' &
       .and. clt_status_name(CLT_EIO) == 'CLT_EIO' .and. clt_status_name(CLT_EFORMAT) == 'CLT_EFORMAT' .and. &
       clt_status_name(CLT_ENOTFOUND) == 'CLT_ENOTFOUND' .and. clt_status_name(CLT_ENONFINITE) == 'CLT_ENONFINITE' &
       .and. clt_status_name(CLT_EINTERNAL) == 'CLT_EINTERNAL', 'every CLT_E* constant has its C name')
  call check(clt_status_name(-20_c_int) == 'CLT_UNKNOWN', 'the list ends at CLT_EINTERNAL')
  call check(len(clt_version()) > 0, 'clt_version')

  ! ---- bad input: an invalid communicator handle (before any device, so
  ! it is tested wherever the test runs)
  rc = clt_comm_create(12345, bad)
  msg = clt_error_message()
  call check(rc /= CLT_OK, 'a garbage communicator handle is refused')
  call check(.not. c_associated(bad%p), 'and gives no communicator')
  call check(index(msg, 'communicator') > 0 .and. index(msg, '12345') > 0, &
       'the message names the communicator and its handle: ' // msg)
#ifdef CLT_TEST_MPI
  call check(rc == CLT_EINVAL, 'a garbage handle is CLT_EINVAL (got ' // clt_status_name(rc) // ')')
  rc = clt_comm_create(-7, bad)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'communicator') > 0 .and. index(msg, '-7') > 0, &
       'a negative handle is CLT_EINVAL naming it: ' // msg)
  rc = clt_comm_create(MPI_COMM_NULL, bad)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'MPI_COMM_NULL') > 0, 'MPI_COMM_NULL is CLT_EINVAL naming it: ' // msg)
#endif

  ! ---- bad input: a spec with a mistake on line 2, through the Fortran
  ! error function with its file:line:col
  rc = clt_model_parse('input 4' // nl // 'linaer 3' // nl, 'bad.model', badmodel)
  msg = clt_error_message()
  call check(rc == CLT_EFORMAT, 'a misspelt layer is CLT_EFORMAT (got ' // clt_status_name(rc) // ')')
  call check(index(msg, 'bad.model:2:1') > 0 .and. index(msg, 'linaer') > 0, &
       'the message is file:line:col and the word: ' // msg)
  call check(.not. c_associated(badmodel%p), 'a bad spec gives no model')
  rc = clt_model_load('/nonexistent/f.model', badmodel)
  msg = clt_error_message()
  call check(rc /= CLT_OK .and. index(msg, '/nonexistent/f.model') > 0, 'a missing spec file is named: ' // msg)
  rc = clt_trainer_step(never, x, y)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'never made') > 0, 'a trainer never made is refused: ' // msg)

  ! ---- handles never made, through the library: refused naming the
  ! argument, or the value of nothing (0), never a crash (issue 38)
  rc = clt_trainer_params(never, pnever)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'clt_trainer_params: t is NULL') > 0, &
       'params of a trainer never made: ' // msg)
  call check(clt_trainer_steps_done(never) == 0, 'steps done of a trainer never made: 0')
  rc = clt_trainer_save_weights(never, weights)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'clt_trainer_save_weights: t is NULL') > 0, &
       'saving the weights of a trainer never made: ' // msg)
  rc = clt_trainer_load_weights(never, weights)
  call check(rc == CLT_EINVAL .and. index(clt_error_message(), 't is NULL') > 0, 'loading into a trainer never made')
  rc = clt_trainer_save_checkpoint(never, ckpt)
  call check(rc == CLT_EINVAL .and. index(clt_error_message(), 't is NULL') > 0, 'a checkpoint of a trainer never made')
  rc = clt_trainer_load_checkpoint(never, ckpt)
  call check(rc == CLT_EINVAL .and. index(clt_error_message(), 't is NULL') > 0, 'resuming a trainer never made')
  call check(clt_model_input_size(nomodel) == 0 .and. clt_model_param_count(nomodel) == 0 .and. &
       clt_model_num_classes(nomodel) == 0 .and. clt_model_labels_per_sample(nomodel) == 0 .and. &
       clt_model_outputs(nomodel) == 0, 'the sizes of a model never made: 0')
  call check(clt_comm_rank(nocomm) == 0 .and. clt_comm_size(nocomm) == 0, 'a communicator never made: 0')
  call check(clt_dataset_count(nods) == 0 .and. clt_dataset_sample_size(nods) == 0, 'a dataset never made: 0')
  rc = clt_dataset_stats(nods, mean, std)
  call check(rc == CLT_EINVAL .and. index(clt_error_message(), 'ds is NULL') > 0, 'stats of a dataset never made')
  rc = clt_dataset_normalize(nods, 0.0, 1.0)
  call check(rc == CLT_EINVAL .and. index(clt_error_message(), 'ds is NULL') > 0, 'normalising a dataset never made')
  call check(clt_devices_count(nodevs) == 0 .and. clt_device_name(nodevs, 0) == '', 'a device list never made')

  ! ---- options: the library's defaults and an optimizer's own
  call clt_options_default(opts, CLT_OPT_ADAMW)
  call check(opts%optimizer == CLT_OPT_ADAMW .and. abs(opts%weight_decay - 0.01) < 1e-7 .and. &
       abs(opts%momentum) < 1e-30, 'AdamW defaults')
  call clt_options_default(opts, CLT_OPT_LION)
  call check(opts%optimizer == CLT_OPT_LION .and. abs(opts%beta2 - 0.99) < 1e-7 .and. &
       abs(opts%weight_decay) < 1e-30, 'Lion defaults (CLT_OPT_LION is the C enum''s value)')
  call clt_options_default(opts)
  call check(opts%optimizer == CLT_OPT_SGD .and. opts%batch == 64 .and. opts%seed == 42 .and. &
       abs(opts%lr - 0.01) < 1e-7 .and. abs(opts%momentum - 0.9) < 1e-7, 'SGD defaults')

  ! ---- devices, communicator, model, trainer
  rc = clt_devices_discover(alldevs)
  if (rc /= CLT_OK .or. clt_devices_count(alldevs) == 0) then
     print '(a)', 'SKIP: no OpenCL device: ' // clt_error_message()
     call finish(77)
  end if
#ifdef CLT_TEST_MPI
  rc = clt_comm_create(MPI_COMM_WORLD, comm)
#else
  rc = clt_comm_create_local(comm)
#endif
  call require(rc == CLT_OK, 'communicator')
  call check(clt_comm_rank(comm) == rank .and. clt_comm_size(comm) == nranks, 'the communicator''s rank and size')
  if (nranks == 1) then
     spec = 'all'
  else
     d = clt_comm_default_device(comm, alldevs)
     call require(d >= 0, 'default device')
     write (spec, '(i0)') d
  end if
  rc = clt_devices_select(alldevs, spec, mine)
  call require(rc == CLT_OK, 'devices ' // trim(spec))
  if (rank == 0) print '(a, i0, a, i0, a, a)', 'ranks: ', nranks, ', devices here: ', clt_devices_count(mine), &
       ', the first: ', clt_device_name(mine, 0)
  rc = clt_devices_select(alldevs, 'no-such-device-anywhere', nodevs)
  call check(rc == CLT_ENOMATCH .and. index(clt_error_message(), 'no-such-device-anywhere') > 0, &
       'a device spec that matches nothing is named')

  rc = clt_model_parse('input 4' // nl // 'linear 16' // nl // 'relu' // nl // 'linear 3' // nl, 'mlp', model)
  call require(rc == CLT_OK, 'model')
  call check(clt_model_input_size(model) == nfeat .and. clt_model_num_classes(model) == nclass .and. &
       clt_model_param_count(model) == 4 * 16 + 16 + 16 * 3 + 3, 'the model''s sizes')

  call clt_options_default(opts)
  opts%batch = nlocal * nranks
  opts%lr = 0.1
  rc = clt_trainer_create(model, mine, comm, opts, trainer)
  call require(rc == CLT_OK, 'trainer')
  call check(clt_trainer_outputs(trainer) == nclass, 'the trainer''s outputs')

  ! ---- steps on this rank's own samples: three clusters
  call make_batch(x, y)
  do i = 1, 20
     rc = clt_trainer_step(trainer, x, y, res)
     call require(rc == CLT_OK, 'step')
     if (i == 1) first_loss = res%loss
     last_loss = res%loss
     if (rank == 0 .and. mod(i, 5) == 0) print '(a, i0, a, f8.5, a, f6.3)', 'step ', i, ': loss ', res%loss, &
          ', accuracy ', res%accuracy
  end do
  call check(res%global_n == nlocal * nranks, 'the global batch is every rank''s samples')
  call check(last_loss < 0.5 * first_loss, 'the loss falls by half in 20 steps')
  call check(clt_trainer_steps_done(trainer) == 20, 'steps done')

  ! ---- predict: out(classes, n)
  out = -1
  rc = clt_trainer_predict(trainer, x, out, y, loss)
  call require(rc == CLT_OK, 'predict')
  call check(all(ieee_is_finite(out)) .and. all(abs(out) < 1e6), 'every output is set and finite')
  correct = 0
  do i = 1, nlocal
     if (maxloc(out(:, i), 1) - 1 == y(i)) correct = correct + 1
  end do
  call check(correct >= nlocal * 3 / 4, 'predict gets most of the training samples right')
  call check(ieee_is_finite(loss) .and. loss > 0, 'predict''s summed loss')

  ! ---- bad input: arrays of the wrong shape, each named
  rc = clt_trainer_predict(trainer, x, out2)
  msg = clt_error_message()
  call check(rc == CLT_ESHAPE .and. index(msg, 'out has 2 rows') > 0, 'out of the wrong shape: ' // msg)
  rc = clt_trainer_step(trainer, x5, y)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'x has 5 rows') > 0, 'x of the wrong shape: ' // msg)
  rc = clt_trainer_step(trainer, x, yshort)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'y has 31 labels') > 0, 'y of the wrong length: ' // msg)
  call check(clt_trainer_steps_done(trainer) == 20, 'refused steps change nothing')
  y(1) = nclass
  rc = clt_trainer_step(trainer, x, y)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. len(msg) > 0, 'a label out of range, through the library: ' // msg)
  call make_batch(x, y)

  ! ---- weights: save, change, load: the same bits
  np = clt_model_param_count(model)
  allocate (p1(np), p2(np), p3(np), q1(np), q2(np))
  call require(clt_trainer_params(trainer, p1) == CLT_OK, 'params')
  call require(clt_trainer_save_weights(trainer, weights) == CLT_OK, 'save weights')
  do i = 1, 3
     call require(clt_trainer_step(trainer, x, y) == CLT_OK, 'step')
  end do
  call require(clt_trainer_params(trainer, p2) == CLT_OK, 'params')
  call check(any(p2 /= p1), 'steps change the parameters')
  call require(clt_trainer_load_weights(trainer, weights) == CLT_OK, 'load weights')
  call require(clt_trainer_params(trainer, p3) == CLT_OK, 'params')
  call check(all(transfer(p3, 1_c_int32_t, size(p3)) == transfer(p1, 1_c_int32_t, size(p1))), &
       'loaded weights are the saved bits')
  rc = clt_trainer_load_weights(trainer, '/nonexistent/w.safetensors')
  call check(rc /= CLT_OK .and. index(clt_error_message(), '/nonexistent/w.safetensors') > 0, &
       'a missing weights file is named')
  ! an empty path (collective: every rank gives it) is refused naming it, not renamed to
  rc = clt_trainer_save_weights(trainer, '')
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'path is an empty string') > 0 .and. index(msg, 'renaming') == 0, &
       'saving the weights to an empty path: ' // msg)
  rc = clt_trainer_save_checkpoint(trainer, '   ')
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'path is an empty string') > 0, &
       'a checkpoint to a blank path (trimmed: empty): ' // msg)

  ! ---- checkpoint: two steps after it, then from it again: the same bits
  call require(clt_trainer_save_checkpoint(trainer, ckpt) == CLT_OK, 'save checkpoint')
  steps_at_ckpt = clt_trainer_steps_done(trainer)
  call two_steps(q1, loss_a)
  call require(clt_trainer_load_checkpoint(trainer, ckpt) == CLT_OK, 'load checkpoint')
  call check(clt_trainer_steps_done(trainer) == steps_at_ckpt, 'the checkpoint''s step count')
  call two_steps(q2, loss_b)
  call check(all(transfer(q1, 1_c_int32_t, size(q1)) == transfer(q2, 1_c_int32_t, size(q2))) .and. &
       loss_a == loss_b, 'a resumed run is the uninterrupted one, bit for bit')

  ! ---- regression: float targets through clt_trainer_step_targets
  rc = clt_model_parse('input 4' // nl // 'linear 16 act=tanh' // nl // 'linear 2' // nl // 'loss mse' // nl, &
       'reg', regmodel)
  call require(rc == CLT_OK, 'regression model: ' // clt_error_message())
  rc = clt_trainer_create(regmodel, mine, comm, opts, reg)
  call require(rc == CLT_OK, 'regression trainer')
  call check(clt_trainer_outputs(reg) == 2, 'a regression model''s outputs are its target values')
  call make_batch(x, y)
  tg(1, :) = 0.5 * (x(1, :) - x(2, :))
  tg(2, :) = 0.25 * x(3, :)
  do i = 1, 30
     rc = clt_trainer_step_targets(reg, x, tg, res)
     if (rc /= CLT_OK) call check(.false., 'regression step: ' // clt_error_message())
     if (i == 1) first_loss = res%loss
     last_loss = res%loss
  end do
  call check(last_loss < 0.5 * first_loss .and. ieee_is_finite(res%rmse) .and. res%rmse > 0, &
       'the regression loss falls by half in 30 steps, with its RMSE')
  call check(abs(res%rmse - sqrt(res%loss)) < 1e-6 * max(1.0_c_double, res%rmse), 'MSE''s RMSE is its root')
  rc = clt_trainer_predict(reg, x, pout)
  call check(rc == CLT_OK, 'regression predict: ' // clt_error_message())
  rc = clt_trainer_step_targets(reg, x, tg_bad, res)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'targets is 3 x') > 0, 'targets of the wrong shape: ' // msg)
  rc = clt_trainer_step(reg, x, y, res)
  call check(rc == CLT_EINVAL, 'labels to a regression model are refused: ' // clt_error_message())
  call clt_trainer_destroy(reg)
  call clt_model_destroy(regmodel)

  if (rank == 0) then
     call remove_file(weights)
     call remove_file(ckpt)
  end if
  call clt_trainer_destroy(trainer)
  call clt_trainer_destroy(trainer) ! a second time: a no-op
  call clt_model_destroy(model)
  call clt_devices_destroy(mine)
  call clt_devices_destroy(alldevs)
  call clt_comm_destroy(comm)
  if (failures > 0) then
     print '(a, i0, a, i0)', 'rank ', rank, ': failures: ', failures
     call finish(1)
  end if
  if (rank == 0) print '(a)', 'test_fortran: all passed'
  call finish(0)
  ! (and the program ends here: no STOP, whose note on floating-point
  ! flags would read as a problem)

contains

  ! Three clusters in four dimensions, a little apart; each rank its own
  ! samples (labels start at its rank), the same every time.
  subroutine make_batch(xb, yb)
    real(c_float), intent(out) :: xb(:, :)
    integer(c_int32_t), intent(out) :: yb(:)
    integer :: j, k
    do j = 1, size(yb)
       yb(j) = int(mod(j + rank, nclass), c_int32_t)
       do k = 1, nfeat
          xb(k, j) = merge(1.5, -0.5, k == yb(j) + 1) + 0.3 * sin(real(7 * j + 13 * k + 31 * rank))
       end do
    end do
  end subroutine make_batch

  subroutine two_steps(p, l)
    real(c_float), intent(out) :: p(:)
    real(c_double), intent(out) :: l
    type(clt_step_result_t) :: r
    call require(clt_trainer_step(trainer, x, y, r) == CLT_OK, 'step')
    call require(clt_trainer_step(trainer, x, y, r) == CLT_OK, 'step')
    l = r%loss
    call require(clt_trainer_params(trainer, p) == CLT_OK, 'params')
  end subroutine two_steps

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (ok) then
       if (rank == 0) print '(a)', 'ok: ' // what
    else
       print '(a, i0, a)', 'FAIL (rank ', rank, '): ' // what
       failures = failures + 1
    end if
  end subroutine check

  ! A step the rest needs: stop now when it fails.
  subroutine require(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
       print '(a, i0, a)', 'FAIL (rank ', rank, '): ' // what // ': ' // clt_error_message()
       call finish(1)
    end if
  end subroutine require

  subroutine remove_file(path)
    character(len=*), intent(in) :: path
    integer :: u, ios
    open (newunit=u, file=path, status='old', iostat=ios)
    if (ios == 0) close (u, status='delete')
  end subroutine remove_file

  subroutine finish(code)
    integer, intent(in) :: code
#ifdef CLT_TEST_MPI
    integer :: e
    if (code == 0 .or. code == 77) then
       call MPI_Finalize(e)
    else
       call MPI_Abort(MPI_COMM_WORLD, code, e)
    end if
#endif
    if (code == 0) return
    if (code == 77) stop 77
    error stop 1
  end subroutine finish

end program test_fortran
