! insitu_unet.f90: the Fortran twin of insitu_unet.c, a U-Net surrogate
! trained inside a running simulation through the cltrain module. The 2-D
! heat equation (explicit, u += alpha * laplacian(u), zero at the domain's
! edge, blobs of heat put in every few cycles) on an NX x NY grid, split
! into strips of rows over the MPI ranks with one halo row exchanged with
! each neighbour every step. Every K solver steps each rank cuts W x W
! windows of the field out of its strip and takes one optimizer step of
! the U-Net (clt_trainer_step_targets; the global batch is every rank's
! windows): a window at step t to the change of its inner S x S by step
! t + K (W = S + 2K: nothing outside the window reaches it in K steps),
! times DSCALE. After the training budget the surrogate forecasts fresh
! states it has not seen (clt_trainer_predict, evaluation mode), and the
! program prints the RMSE of its forecast, that of persistence (the
! current field as the forecast) and their ratio, then the solver's time
! per step alone and with training every K steps.
!
!   gfortran insitu_unet.f90 $(pkg-config --cflags --libs cltrain-fortran) -o insitu_unet_f
!   mpirun -np 2 ./insitu_unet_f [--cycles N] [--eval N] [--nx N] [--ny N]
program insitu_unet
  use, intrinsic :: iso_c_binding
  use mpi
  use cltrain
  implicit none

  ! W x W windows every STRIDE cells, forecast K steps ahead on their inner S x S
  integer, parameter :: S = 16, K = 2, W = S + 2 * K, STRIDE = 4
  real(c_float), parameter :: ALPHA = 0.2
  ! the change over K steps times 1 / (K alpha): a stencil of weights of order 1
  real(c_float), parameter :: DSCALE = 1.0 / (K * ALPHA)
  character, parameter :: NL = new_line('a')
  ! The U-Net of insitu_unet.c, line for line.
  character(len=*), parameter :: spec = &
       'input 1 20 20' // NL // &
       'conv2d 8 kernel=5' // NL // &
       'save linear' // NL // &
       'batchnorm' // NL // &
       'silu' // NL // &
       'save level1' // NL // &
       'maxpool2d 2' // NL // &
       'conv2d 16 kernel=3 pad=1' // NL // &
       'batchnorm' // NL // &
       'silu' // NL // &
       'save level2' // NL // &
       'maxpool2d 2' // NL // &
       'conv2d 32 kernel=3 pad=1' // NL // &
       'batchnorm' // NL // &
       'silu' // NL // &
       'convtranspose2d 16 kernel=2 stride=2' // NL // &
       'concat level2' // NL // &
       'conv2d 16 kernel=3 pad=1' // NL // &
       'batchnorm' // NL // &
       'silu' // NL // &
       'upsample scale=2 mode=linear' // NL // &
       'concat level1' // NL // &
       'conv2d 8 kernel=3 pad=1' // NL // &
       'batchnorm' // NL // &
       'silu' // NL // &
       'concat linear' // NL // &
       'conv2d 1 kernel=1' // NL // &
       'loss mse' // NL

  type(clt_comm_t) :: comm
  type(clt_devices_t) :: alldevs, usable, mine
  type(clt_model_t) :: model
  type(clt_trainer_t) :: trainer
  type(clt_options_t) :: opts
  type(clt_step_result_t) :: res
  ! this rank's rows of the field, u(x, r) for r = 0 .. rows + 1 (halo rows 0 and rows + 1)
  real(c_float), allocatable :: u(:, :), v(:, :), snap(:, :)
  real(c_float), allocatable :: x(:, :), y(:, :), pred(:, :)
  integer :: nx = 48, ny = 48, cycles = 300, eval = 40
  integer :: rank, nranks, rows, row0, maxn, n, c, i, step, d, ierr, provided
  integer(c_int64_t) :: seed
  real(c_double) :: t0, t1, t2, alone, t_solve, t_train, se, pe, values, sums(3), total(3)
  character(len=64) :: arg, val
  character(len=16) :: one

  call MPI_Init_thread(MPI_THREAD_FUNNELED, provided, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  do i = 1, command_argument_count() - 1, 2
     call get_command_argument(i, arg)
     call get_command_argument(i + 1, val)
     select case (arg)
     case ('--cycles')
        read (val, *, iostat=ierr) cycles
     case ('--eval')
        read (val, *, iostat=ierr) eval
     case ('--nx')
        read (val, *, iostat=ierr) nx
     case ('--ny')
        read (val, *, iostat=ierr) ny
     case default
        ierr = 1
     end select
     if (ierr /= 0 .or. cycles < 1 .or. eval < 1 .or. nx < 1 .or. ny < 1) then
        if (rank == 0) write (0, '(a)') 'insitu_unet_f: unknown option or bad value ''' // trim(arg) // ' ' // &
             trim(val) // ''' (--cycles N, --eval N, --nx N, --ny N)'
        call MPI_Finalize(ierr)
        stop 2
     end if
  end do

  row0 = int(int(ny, c_int64_t) * rank / nranks)
  rows = int(int(ny, c_int64_t) * (rank + 1) / nranks) - row0
  if (rows < W .or. nx < W) then
     if (rank == 0) write (0, '(a, i0, a, i0, a, i0, a, i0, a)') 'insitu_unet_f: a strip of ', rows, ' x ', nx, &
          ' is smaller than a ', W, ' x ', W, ' window: fewer ranks or a larger grid'
     call MPI_Finalize(ierr)
     stop 2
  end if
  allocate (u(nx, 0:rows + 1), v(nx, 0:rows + 1), snap(nx, 0:rows + 1))
  u = 0
  v = 0
  maxn = ((rows - W) / STRIDE + 1) * ((nx - W) / STRIDE + 1)
  allocate (x(W * W, maxn), y(S * S, maxn), pred(S * S, maxn))

  ! The communicator (a library without MPI trains this process alone); one
  ! device per rank, by its place on its node, among those CLT_DEVICES names
  ! (all when unset: the empty spec); the U-Net, Adam.
  call try(clt_comm_create(MPI_COMM_WORLD, comm), 'communicator', CLT_EUNSUPPORTED)
  if (.not. c_associated(comm%p)) call try(clt_comm_create_local(comm), 'communicator')
  call try(clt_devices_discover(alldevs), 'devices')
  call try(clt_devices_select(alldevs, '', usable), 'devices')
  d = clt_comm_default_device(comm, usable)
  if (d < 0) call try(d, 'devices')
  write (one, '(i0)') d
  call try(clt_devices_select(usable, one, mine), 'devices')
  call clt_devices_destroy(usable)
  call try(clt_model_parse(spec, 'unet', model), 'model')
  call clt_options_default(opts, CLT_OPT_ADAM)
  opts%lr = 1e-2
  opts%batch = maxn ! the most any replica runs at once
  call try(clt_trainer_create(model, mine, comm, opts, trainer), 'trainer')
  if (rank == 0) print '(a, i0, a, i0, a, i0, a, i0, a, i0, a, i0, a, i0, a, i0, a)', 'insitu_unet_f: ', nx, ' x ', ny, &
       ' grid on ', nranks, ' rank(s), ', maxn, ' windows of ', W, ' x ', W, ' a rank, forecast ', K, &
       ' steps ahead, ', clt_model_param_count(model), ' parameters'

  ! Warm up the field, then time the solver alone.
  step = 0
  seed = 42
  do i = 1, 8
     call add_blob(seed)
  end do
  do i = 1, 100
     call solve_step()
  end do
  t0 = MPI_Wtime()
  do i = 1, 50
     call solve_step()
  end do
  alone = (MPI_Wtime() - t0) / 50

  ! ---- training: one optimizer step every K solver steps
  t_solve = 0
  t_train = 0
  do c = 0, cycles - 1
     if (mod(c, 4) == 0) call add_blob(seed)
     snap = u
     t1 = MPI_Wtime()
     do i = 1, K
        call solve_step()
     end do
     t_solve = t_solve + (MPI_Wtime() - t1)
     t2 = MPI_Wtime()
     n = windows()
     call try(clt_trainer_step_targets(trainer, x(:, 1:n), y(:, 1:n), res), 'training step')
     t_train = t_train + (MPI_Wtime() - t2)
     if (rank == 0 .and. (mod(c, 50) == 0 .or. c == cycles - 1)) &
          print '(a, i0, a, i0, a, f8.5, a, f8.5, a)', 'cycle ', c, ' (solver step ', step, '): training rmse ', &
          res%rmse / DSCALE, ' (persistence ', sqrt(sum(real(y(:, 1:n), c_double)**2) / (n * S * S)) / DSCALE, ')'
  end do

  ! ---- fresh states: forecast each next one, no training
  se = 0
  pe = 0
  values = 0
  seed = 4242 ! heat the surrogate has not seen
  do c = 0, eval - 1
     if (mod(c, 2) == 0) call add_blob(seed)
     snap = u
     do i = 1, K
        call solve_step()
     end do
     n = windows()
     call try(clt_trainer_predict(trainer, x(:, 1:n), pred(:, 1:n)), 'forecast')
     se = se + sum((real(pred(:, 1:n), c_double) - y(:, 1:n))**2) / DSCALE**2 ! the surrogate's
     pe = pe + sum(real(y(:, 1:n), c_double)**2) / DSCALE**2                  ! "nothing changes"
     values = values + real(n, c_double) * S * S
  end do
  sums = [se, pe, values]
  call MPI_Allreduce(sums, total, 3, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
     print '(a, f9.6, a, f9.6, a, f6.2, a, i0, a, i0, a)', 'surrogate forecast rmse on fresh states: ', &
          sqrt(total(1) / total(3)), ', persistence ', sqrt(total(2) / total(3)), ', ratio ', sqrt(total(2) / total(1)), &
          ' (', eval, ' cycles of ', K, ' steps)'
     print '(a, f8.3, a, f8.3, a, i0, a, f8.3, a)', 'solver: ', alone * 1e3, ' ms a step alone, ', &
          (t_solve + t_train) / (real(cycles, c_double) * K) * 1e3, ' ms a step with training every ', K, &
          ' steps (training ', t_train / cycles * 1e3, ' ms a cycle)'
  end if

  call clt_trainer_destroy(trainer)
  call clt_model_destroy(model)
  call clt_devices_destroy(mine)
  call clt_devices_destroy(alldevs)
  call clt_comm_destroy(comm)
  call MPI_Finalize(ierr)

contains

  ! The neighbours' edge rows into the halo rows (zero at the domain's edge).
  subroutine exchange()
    integer :: up, down
    up = MPI_PROC_NULL
    down = MPI_PROC_NULL
    if (rank > 0) up = rank - 1
    if (rank < nranks - 1) down = rank + 1
    u(:, 0) = 0
    u(:, rows + 1) = 0
    call MPI_Sendrecv(u(:, 1), nx, MPI_REAL, up, 0, u(:, rows + 1), nx, MPI_REAL, down, 0, MPI_COMM_WORLD, &
         MPI_STATUS_IGNORE, ierr)
    call MPI_Sendrecv(u(:, rows), nx, MPI_REAL, down, 1, u(:, 0), nx, MPI_REAL, up, 1, MPI_COMM_WORLD, &
         MPI_STATUS_IGNORE, ierr)
  end subroutine exchange

  ! One explicit step.
  subroutine solve_step()
    integer :: r, j
    real(c_float) :: l, rt
    call exchange()
    do r = 1, rows
       do j = 1, nx
          l = 0
          rt = 0
          if (j > 1) l = u(j - 1, r)
          if (j < nx) rt = u(j + 1, r)
          v(j, r) = u(j, r) + ALPHA * (l + rt + u(j, r - 1) + u(j, r + 1) - 4 * u(j, r))
       end do
    end do
    u(:, 1:rows) = v(:, 1:rows)
    step = step + 1
  end subroutine solve_step

  ! Heat put in: a Gaussian blob at a place drawn from seed (the same on
  ! every rank, in global coordinates), insitu_unet.c's generator.
  subroutine add_blob(seed)
    integer(c_int64_t), intent(inout) :: seed
    integer(c_int64_t) :: s1, s2
    real(c_float) :: cx, cy, amp, wd, dx, dy
    integer :: r, j
    s1 = next(seed)
    s2 = next(s1)
    seed = s2
    cx = real(iand(ishft(s1, -8), 65535_c_int64_t), c_float) / 65536.0 * nx
    amp = 0.5 + real(iand(s1, 255_c_int64_t), c_float) / 512.0
    cy = real(iand(ishft(s2, -8), 65535_c_int64_t), c_float) / 65536.0 * ny
    wd = 2.0 + real(iand(s2, 3_c_int64_t), c_float)
    do r = 1, rows
       do j = 1, nx
          dx = (j - 1) - cx
          dy = (row0 + r - 1) - cy
          u(j, r) = u(j, r) + amp * exp(-(dx * dx + dy * dy) / (2 * wd * wd))
       end do
    end do
  end subroutine add_blob

  ! seed * 1103515245 + 12345 modulo 2^32, as C's unsigned arithmetic.
  function next(s) result(t)
    integer(c_int64_t), intent(in) :: s
    integer(c_int64_t) :: t
    t = iand(iand(s, 4294967295_c_int64_t) * 1103515245_c_int64_t + 12345_c_int64_t, 4294967295_c_int64_t)
  end function next

  ! Windows inside the strip (its own rows): x(:, m) the W x W of snap less
  ! its mean (the change does not depend on the field's level), y(:, m) the
  ! inner S x S of u less that of snap, times DSCALE. Returns their count.
  function windows() result(m)
    integer :: m, r, j, i
    m = 0
    do r = 1, rows - W + 1, STRIDE
       do j = 1, nx - W + 1, STRIDE
          m = m + 1
          do i = 0, W - 1
             x(i * W + 1:i * W + W, m) = snap(j:j + W - 1, r + i)
          end do
          x(:, m) = x(:, m) - sum(x(:, m)) / (W * W)
          do i = 0, S - 1
             y(i * S + 1:i * S + S, m) = (u(j + K:j + K + S - 1, r + K + i) - snap(j + K:j + K + S - 1, r + K + i)) * DSCALE
          end do
       end do
    end do
  end function windows

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
    write (0, '(a)') 'insitu_unet_f: ' // what // ': ' // clt_status_name(rc) // ': ' // clt_error_message()
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine try

end program insitu_unet
