! cltrain.f90: the Fortran 2008 module of libcltrain (use cltrain), over the
! public C API through ISO_C_BINDING: devices, communicators (from a Fortran
! MPI handle), models, a trainer driven one step at a time on the program's
! own arrays, prediction, weights and checkpoints.
!
! Conventions, as in cltrain.h:
!   - Every function that can fail is an integer(c_int) function returning
!     CLT_OK (0) or a negative CLT_E* status; clt_error_message() then gives
!     the sentence saying what failed and where.
!   - Objects (clt_devices_t, clt_comm_t, clt_model_t, clt_trainer_t,
!     clt_dataset_t) are opaque handles, made by *_create / *_discover /
!     *_load and released by *_destroy, which may be called on a handle that
!     was never made. Any other function given a handle never made (or
!     destroyed) returns CLT_EINVAL naming it, or, for one that returns a
!     size or count, 0.
!   - Strings are Fortran strings; trailing blanks are trimmed.
!   - Arrays follow Fortran's order: a batch of n samples is x(input_size, n)
!     (each sample contiguous, exactly the C API's (n, input_size) row-major),
!     labels y(n * labels_per_sample), outputs out(outputs, n).
!   - The shapes of arrays are checked here before the C library is called; a
!     wrong one is CLT_EINVAL (CLT_ESHAPE for a result that does not fit)
!     naming the argument. Those messages are kept in the module, not per
!     thread as the library's are: from threads, check shapes yourself.
module cltrain
  use, intrinsic :: iso_c_binding
  implicit none
  private

  ! ---- status codes (cltrain.h's CLT_STATUS_MAP; the test checks each name)
  integer(c_int), parameter, public :: CLT_OK = 0, CLT_EINVAL = -1, CLT_ENOMEM = -2, CLT_ENOICD = -3, &
       CLT_ENODEV = -4, CLT_ENOMATCH = -5, CLT_ECL = -6, CLT_EBUILD = -7, CLT_EDEVMEM = -8, &
       CLT_EUNSUPPORTED = -9, CLT_ESHAPE = -10, CLT_EBLAS = -11, CLT_EMPI = -12, CLT_ETIMEDOUT = -13, &
       CLT_EMISMATCH = -14, CLT_EIO = -15, CLT_EFORMAT = -16, CLT_ENOTFOUND = -17, CLT_ENONFINITE = -18, &
       CLT_EINTERNAL = -19
  ! optimizers, schedules, precisions, a label that counts for nothing
  integer(c_int), parameter, public :: CLT_OPT_SGD = 0, CLT_OPT_ADAM = 1, CLT_OPT_ADAMW = 2, CLT_OPT_LION = 3
  integer(c_int), parameter, public :: CLT_SCHED_CONSTANT = 0, CLT_SCHED_STEP = 1, CLT_SCHED_COSINE = 2
  integer(c_int), parameter, public :: CLT_F32 = 0, CLT_F16 = 1
  integer(c_int32_t), parameter, public :: CLT_IGNORE_LABEL = -100
  integer(c_int), parameter, public :: CLT_DEVICE_CPU = 1, CLT_DEVICE_GPU = 2, CLT_DEVICE_ACCELERATOR = 4, &
       CLT_DEVICE_OTHER = 8

  ! ---- handles ---------------------------------------------------------------
  type, public :: clt_devices_t
     type(c_ptr) :: p = c_null_ptr
  end type clt_devices_t
  type, public :: clt_comm_t
     type(c_ptr) :: p = c_null_ptr
  end type clt_comm_t
  type, public :: clt_model_t
     type(c_ptr) :: p = c_null_ptr
  end type clt_model_t
  type, public :: clt_trainer_t
     type(c_ptr) :: p = c_null_ptr
     ! the model's sizes, remembered when made, for the checks of x, y and out
     integer(c_int64_t) :: input_size = 0, labels_per_sample = 0, outputs = 0
  end type clt_trainer_t
  type, public :: clt_dataset_t
     type(c_ptr) :: p = c_null_ptr
  end type clt_dataset_t

  ! Training options: NOT a mirror of clt_train_options (pointers, a
  ! callback, nested structs, and fields added as the library grows would
  ! make a bind(C) copy of it read the wrong offsets without a word), but
  ! this binding's own flat struct, mirrored by clt_f_options in
  ! cltrain_shim.c, which copies it over the library's defaults. Fill it with
  ! clt_options_default, then change what you need.
  type, public, bind(C) :: clt_options_t
     integer(c_int64_t) :: batch = 64          ! global batch per optimizer step (all ranks' samples)
     integer(c_int64_t) :: seed = 42           ! initialisation and dropout
     integer(c_int64_t) :: warmup_steps = 0    ! linear warm-up
     integer(c_int64_t) :: total_steps = 0     ! cosine: the whole run
     integer(c_int64_t) :: step_size = 0       ! step schedule: steps between decays
     integer(c_int64_t) :: check_every = 100   ! compare the replicas' parameters every N steps
     real(c_double) :: bucket_mb = 1           ! gradient bucket, MiB
     integer(c_int32_t) :: accumulate = 1      ! micro-batches per step
     integer(c_int32_t) :: optimizer = 0       ! CLT_OPT_*
     integer(c_int32_t) :: nesterov = 0
     integer(c_int32_t) :: schedule = 0        ! CLT_SCHED_*
     integer(c_int32_t) :: precision = 0       ! CLT_F32 or CLT_F16
     integer(c_int32_t) :: decay_all = 0       ! AdamW: decay every parameter
     real(c_float) :: lr = 0.01
     real(c_float) :: momentum = 0.9
     real(c_float) :: weight_decay = 0
     real(c_float) :: beta1 = 0.9, beta2 = 0.999, eps = 1e-8
     real(c_float) :: clip = 0                 ! global-norm clipping; 0: off
     real(c_float) :: gamma = 0.1              ! step schedule: decay factor
     real(c_float) :: min_lr = 0               ! cosine: final learning rate
     real(c_float) :: loss_scale = 65536       ! CLT_F16: first dynamic loss scale
  end type clt_options_t

  ! What one step did; clt_step_result of cltrain.h exactly (a small public
  ! struct of plain numbers, so it is bound as it is).
  type, public, bind(C) :: clt_step_result_t
     real(c_double) :: loss = 0          ! mean over the global batch
     real(c_double) :: accuracy = 0      ! fraction of labels predicted right
     real(c_double) :: grad_norm = 0
     integer(c_int) :: skipped = 0       ! 1: fp16 loss scaling skipped the update
     integer(c_int64_t) :: global_n = 0  ! samples of all ranks together
     real(c_double) :: rmse = 0          ! regression: RMSE over the global batch; NaN for a classifier
  end type clt_step_result_t

  public :: clt_error_message, clt_status_name, clt_strerror, clt_clear_error, clt_version
  public :: clt_devices_discover, clt_devices_select, clt_devices_count, clt_devices_destroy
  public :: clt_device_name, clt_device_type
  public :: clt_comm_create, clt_comm_create_local, clt_comm_destroy, clt_comm_rank, clt_comm_size
  public :: clt_comm_default_device
  public :: clt_model_load, clt_model_parse, clt_model_destroy, clt_model_input_size, clt_model_num_classes
  public :: clt_model_labels_per_sample, clt_model_param_count, clt_model_outputs
  public :: clt_options_default
  public :: clt_trainer_create, clt_trainer_destroy, clt_trainer_step, clt_trainer_step_targets, clt_trainer_predict
  public :: clt_trainer_params
  public :: clt_trainer_steps_done, clt_trainer_outputs
  public :: clt_trainer_save_weights, clt_trainer_load_weights, clt_trainer_save_checkpoint
  public :: clt_trainer_load_checkpoint
  public :: clt_dataset_open_idx, clt_dataset_destroy, clt_dataset_count, clt_dataset_sample_size
  public :: clt_dataset_stats, clt_dataset_normalize, clt_dataset_get_batch

  ! The message of a check made here (an array's shape), which the library's
  ! per-thread last error cannot hold; empty when the last failure was the
  ! library's.
  character(len=:), allocatable, save :: module_error

  interface
     ! libc
     pure function c_strlen(s) bind(C, name="strlen") result(n)
       import :: c_ptr, c_size_t
       type(c_ptr), value :: s
       integer(c_size_t) :: n
     end function c_strlen
     ! core
     function c_last_error() bind(C, name="clt_last_error") result(p)
       import :: c_ptr
       type(c_ptr) :: p
     end function c_last_error
     subroutine c_clear_error() bind(C, name="clt_clear_error")
     end subroutine c_clear_error
     function c_status_name(status) bind(C, name="clt_status_name") result(p)
       import :: c_ptr, c_int
       integer(c_int), value :: status
       type(c_ptr) :: p
     end function c_status_name
     function c_strerror(status) bind(C, name="clt_strerror") result(p)
       import :: c_ptr, c_int
       integer(c_int), value :: status
       type(c_ptr) :: p
     end function c_strerror
     function c_version() bind(C, name="clt_version") result(p)
       import :: c_ptr
       type(c_ptr) :: p
     end function c_version
     ! devices
     function c_devices_discover(out) bind(C, name="clt_devices_discover") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_devices_discover
     function c_devices_select(all, spec, out) bind(C, name="clt_devices_select") result(rc)
       import :: c_ptr, c_int, c_char
       type(c_ptr), value :: all
       character(kind=c_char), intent(in) :: spec(*)
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_devices_select
     function c_devices_count(devs) bind(C, name="clt_devices_count") result(n)
       import :: c_ptr, c_int
       type(c_ptr), value :: devs
       integer(c_int) :: n
     end function c_devices_count
     subroutine c_devices_destroy(devs) bind(C, name="clt_devices_destroy")
       import :: c_ptr
       type(c_ptr), value :: devs
     end subroutine c_devices_destroy
     function c_device_name(devs, i) bind(C, name="clt_f_device_name") result(p)
       import :: c_ptr, c_int
       type(c_ptr), value :: devs
       integer(c_int), value :: i
       type(c_ptr) :: p
     end function c_device_name
     function c_device_type(devs, i) bind(C, name="clt_f_device_type") result(t)
       import :: c_ptr, c_int
       type(c_ptr), value :: devs
       integer(c_int), value :: i
       integer(c_int) :: t
     end function c_device_type
     ! communicators (MPI_Fint is a C int wherever MPI runs)
     function c_comm_create_f(fcomm, out) bind(C, name="clt_comm_create_f") result(rc)
       import :: c_ptr, c_int
       integer(c_int), value :: fcomm
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_comm_create_f
     function c_comm_create_local(out) bind(C, name="clt_comm_create_local") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_comm_create_local
     subroutine c_comm_destroy(comm) bind(C, name="clt_comm_destroy")
       import :: c_ptr
       type(c_ptr), value :: comm
     end subroutine c_comm_destroy
     function c_comm_rank(comm) bind(C, name="clt_comm_rank") result(r)
       import :: c_ptr, c_int
       type(c_ptr), value :: comm
       integer(c_int) :: r
     end function c_comm_rank
     function c_comm_size(comm) bind(C, name="clt_comm_size") result(r)
       import :: c_ptr, c_int
       type(c_ptr), value :: comm
       integer(c_int) :: r
     end function c_comm_size
     function c_comm_default_device(comm, devs) bind(C, name="clt_comm_default_device") result(r)
       import :: c_ptr, c_int
       type(c_ptr), value :: comm, devs
       integer(c_int) :: r
     end function c_comm_default_device
     ! models
     function c_model_load(path, out) bind(C, name="clt_model_load") result(rc)
       import :: c_ptr, c_int, c_char
       character(kind=c_char), intent(in) :: path(*)
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_model_load
     function c_model_parse(text, name, out) bind(C, name="clt_model_parse") result(rc)
       import :: c_ptr, c_int, c_char
       character(kind=c_char), intent(in) :: text(*), name(*)
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_model_parse
     subroutine c_model_destroy(m) bind(C, name="clt_model_destroy")
       import :: c_ptr
       type(c_ptr), value :: m
     end subroutine c_model_destroy
     function c_model_input_size(m) bind(C, name="clt_model_input_size") result(n)
       import :: c_ptr, c_int64_t
       type(c_ptr), value :: m
       integer(c_int64_t) :: n
     end function c_model_input_size
     function c_model_param_count(m) bind(C, name="clt_model_param_count") result(n)
       import :: c_ptr, c_int64_t
       type(c_ptr), value :: m
       integer(c_int64_t) :: n
     end function c_model_param_count
     function c_model_num_classes(m) bind(C, name="clt_model_num_classes") result(n)
       import :: c_ptr, c_int
       type(c_ptr), value :: m
       integer(c_int) :: n
     end function c_model_num_classes
     function c_model_labels_per_sample(m) bind(C, name="clt_model_labels_per_sample") result(n)
       import :: c_ptr, c_int
       type(c_ptr), value :: m
       integer(c_int) :: n
     end function c_model_labels_per_sample
     ! options and trainers
     function c_options_size() bind(C, name="clt_f_options_size") result(n)
       import :: c_size_t
       integer(c_size_t) :: n
     end function c_options_size
     subroutine c_options_defaults(o, optimizer) bind(C, name="clt_f_options_defaults")
       import :: clt_options_t, c_int
       type(clt_options_t), intent(out) :: o
       integer(c_int), value :: optimizer
     end subroutine c_options_defaults
     function c_trainer_create(m, devs, comm, o, out) bind(C, name="clt_f_trainer_create") result(rc)
       import :: c_ptr, c_int, clt_options_t
       type(c_ptr), value :: m, devs, comm
       type(clt_options_t), intent(in) :: o
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_trainer_create
     subroutine c_trainer_destroy(t) bind(C, name="clt_trainer_destroy")
       import :: c_ptr
       type(c_ptr), value :: t
     end subroutine c_trainer_destroy
     function c_trainer_step(t, x, y, n, res) bind(C, name="clt_trainer_step") result(rc)
       import :: c_ptr, c_int, c_int64_t, c_float, c_int32_t, clt_step_result_t
       type(c_ptr), value :: t
       real(c_float), intent(in) :: x(*)
       integer(c_int32_t), intent(in) :: y(*)
       integer(c_int64_t), value :: n
       type(clt_step_result_t), intent(out) :: res
       integer(c_int) :: rc
     end function c_trainer_step
     function c_trainer_step_targets(t, x, y, n, count, res) bind(C, name="clt_trainer_step_targets") result(rc)
       import :: c_ptr, c_int, c_int64_t, c_float, clt_step_result_t
       type(c_ptr), value :: t
       real(c_float), intent(in) :: x(*), y(*)
       integer(c_int64_t), value :: n, count
       type(clt_step_result_t), intent(out) :: res
       integer(c_int) :: rc
     end function c_trainer_step_targets
     function c_trainer_forward(t, x, y, n, out, count, loss) bind(C, name="clt_trainer_forward") result(rc)
       import :: c_ptr, c_int, c_int64_t, c_float, c_double
       type(c_ptr), value :: t, y
       real(c_float), intent(in) :: x(*)
       integer(c_int64_t), value :: n, count
       real(c_float), intent(inout) :: out(*)
       real(c_double), intent(out) :: loss
       integer(c_int) :: rc
     end function c_trainer_forward
     function c_trainer_params(t, out, count) bind(C, name="clt_trainer_params") result(rc)
       import :: c_ptr, c_int, c_int64_t, c_float
       type(c_ptr), value :: t
       real(c_float), intent(inout) :: out(*)
       integer(c_int64_t), value :: count
       integer(c_int) :: rc
     end function c_trainer_params
     function c_trainer_steps_done(t) bind(C, name="clt_trainer_steps_done") result(n)
       import :: c_ptr, c_int64_t
       type(c_ptr), value :: t
       integer(c_int64_t) :: n
     end function c_trainer_steps_done
     function c_save_weights(t, path) bind(C, name="clt_trainer_save_weights") result(rc)
       import :: c_ptr, c_int, c_char
       type(c_ptr), value :: t
       character(kind=c_char), intent(in) :: path(*)
       integer(c_int) :: rc
     end function c_save_weights
     function c_load_weights(t, path) bind(C, name="clt_trainer_load_weights") result(rc)
       import :: c_ptr, c_int, c_char
       type(c_ptr), value :: t
       character(kind=c_char), intent(in) :: path(*)
       integer(c_int) :: rc
     end function c_load_weights
     function c_save_checkpoint(t, path) bind(C, name="clt_trainer_save_checkpoint") result(rc)
       import :: c_ptr, c_int, c_char
       type(c_ptr), value :: t
       character(kind=c_char), intent(in) :: path(*)
       integer(c_int) :: rc
     end function c_save_checkpoint
     function c_load_checkpoint(t, path) bind(C, name="clt_trainer_load_checkpoint") result(rc)
       import :: c_ptr, c_int, c_char
       type(c_ptr), value :: t
       character(kind=c_char), intent(in) :: path(*)
       integer(c_int) :: rc
     end function c_load_checkpoint
     ! datasets
     function c_dataset_open_idx(dir, split, out) bind(C, name="clt_dataset_open_idx") result(rc)
       import :: c_ptr, c_int, c_char
       character(kind=c_char), intent(in) :: dir(*), split(*)
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_dataset_open_idx
     subroutine c_dataset_destroy(ds) bind(C, name="clt_dataset_destroy")
       import :: c_ptr
       type(c_ptr), value :: ds
     end subroutine c_dataset_destroy
     function c_dataset_count(ds) bind(C, name="clt_dataset_count") result(n)
       import :: c_ptr, c_int64_t
       type(c_ptr), value :: ds
       integer(c_int64_t) :: n
     end function c_dataset_count
     function c_dataset_sample_size(ds) bind(C, name="clt_dataset_sample_size") result(n)
       import :: c_ptr, c_int64_t
       type(c_ptr), value :: ds
       integer(c_int64_t) :: n
     end function c_dataset_sample_size
     function c_dataset_labels_per_sample(ds) bind(C, name="clt_dataset_labels_per_sample") result(n)
       import :: c_ptr, c_int64_t
       type(c_ptr), value :: ds
       integer(c_int64_t) :: n
     end function c_dataset_labels_per_sample
     function c_dataset_stats(ds, mean, std) bind(C, name="clt_dataset_stats") result(rc)
       import :: c_ptr, c_int, c_float
       type(c_ptr), value :: ds
       real(c_float), intent(out) :: mean, std
       integer(c_int) :: rc
     end function c_dataset_stats
     function c_dataset_normalize(ds, mean, std) bind(C, name="clt_dataset_normalize") result(rc)
       import :: c_ptr, c_int, c_float
       type(c_ptr), value :: ds
       real(c_float), value :: mean, std
       integer(c_int) :: rc
     end function c_dataset_normalize
     function c_dataset_get_batch(ds, indices, n, x, y) bind(C, name="clt_dataset_get_batch") result(rc)
       import :: c_ptr, c_int, c_int64_t, c_float, c_int32_t
       type(c_ptr), value :: ds
       integer(c_int64_t), intent(in) :: indices(*)
       integer(c_int64_t), value :: n
       real(c_float), intent(inout) :: x(*)
       integer(c_int32_t), intent(inout) :: y(*)
       integer(c_int) :: rc
     end function c_dataset_get_batch
  end interface

contains

  ! ---- strings -----------------------------------------------------------------

  ! A Fortran string as a C string (trailing blanks trimmed).
  pure function c_str(s) result(cs)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: cs
    cs = trim(s) // c_null_char
  end function c_str

  ! A C string (NULL: "") as a Fortran string of its length.
  function f_str(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    if (.not. c_associated(p)) then
       s = ''
       return
    end if
    n = c_strlen(p)
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
       s(i:i) = chars(i)
    end do
  end function f_str

  ! Record a failure found here (before the library was called).
  function fail(status, msg) result(rc)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: msg
    integer(c_int) :: rc
    module_error = msg
    rc = status
  end function fail

  ! Every call into the library starts here, so clt_error_message tells the
  ! library's message from an older one of the module's.
  subroutine begin()
    module_error = ''
  end subroutine begin

  function itoa(i) result(s)
    integer(c_int64_t), intent(in) :: i
    character(len=:), allocatable :: s
    character(len=24) :: buf
    write (buf, '(i0)') i
    s = trim(buf)
  end function itoa

  ! ---- core --------------------------------------------------------------------

  ! The detail of the last failure: what failed, where, what to do; "" when
  ! nothing has failed.
  function clt_error_message() result(msg)
    character(len=:), allocatable :: msg
    if (allocated(module_error)) then
       if (len(module_error) > 0) then
          msg = module_error
          return
       end if
    end if
    msg = f_str(c_last_error())
  end function clt_error_message

  subroutine clt_clear_error()
    call begin()
    call c_clear_error()
  end subroutine clt_clear_error

  ! "CLT_EINVAL" for CLT_EINVAL; "CLT_UNKNOWN" for codes not in the list.
  function clt_status_name(status) result(s)
    integer(c_int), intent(in) :: status
    character(len=:), allocatable :: s
    s = f_str(c_status_name(status))
  end function clt_status_name

  ! A short sentence for a status ("invalid argument").
  function clt_strerror(status) result(s)
    integer(c_int), intent(in) :: status
    character(len=:), allocatable :: s
    s = f_str(c_strerror(status))
  end function clt_strerror

  function clt_version() result(s)
    character(len=:), allocatable :: s
    s = f_str(c_version())
  end function clt_version

  ! ---- devices -----------------------------------------------------------------

  ! Every device of every OpenCL platform (CLT_ENOICD without any).
  function clt_devices_discover(devs) result(rc)
    type(clt_devices_t), intent(out) :: devs
    integer(c_int) :: rc
    call begin()
    rc = c_devices_discover(devs%p)
  end function clt_devices_discover

  ! Choose devices of all by a spec ("all", "gpu", "cpu", "pocl", "0,2", ...;
  ! "" means the environment variable CLT_DEVICES, "all" when unset).
  function clt_devices_select(all, spec, sel) result(rc)
    type(clt_devices_t), intent(in) :: all
    character(len=*), intent(in) :: spec
    type(clt_devices_t), intent(out) :: sel
    integer(c_int) :: rc
    call begin()
    rc = c_devices_select(all%p, c_str(spec), sel%p)
  end function clt_devices_select

  function clt_devices_count(devs) result(n)
    type(clt_devices_t), intent(in) :: devs
    integer :: n
    n = 0
    if (c_associated(devs%p)) n = c_devices_count(devs%p)
  end function clt_devices_count

  ! The name of device i (0-based, as cltrain devices lists them); "" when
  ! i is out of range.
  function clt_device_name(devs, i) result(s)
    type(clt_devices_t), intent(in) :: devs
    integer, intent(in) :: i
    character(len=:), allocatable :: s
    s = f_str(c_device_name(devs%p, int(i, c_int)))
  end function clt_device_name

  ! CLT_DEVICE_CPU, _GPU, ...; 0 when i is out of range.
  function clt_device_type(devs, i) result(t)
    type(clt_devices_t), intent(in) :: devs
    integer, intent(in) :: i
    integer :: t
    t = c_device_type(devs%p, int(i, c_int))
  end function clt_device_type

  subroutine clt_devices_destroy(devs)
    type(clt_devices_t), intent(inout) :: devs
    call c_devices_destroy(devs%p)
    devs%p = c_null_ptr
  end subroutine clt_devices_destroy

  ! ---- communicators -----------------------------------------------------------

  ! A communicator over the ranks of the Fortran MPI communicator `comm`:
  ! an INTEGER handle of `use mpi` (MPI_COMM_WORLD, or one the program made)
  ! or comm%MPI_VAL of an mpi_f08 type(MPI_Comm). Collective over comm;
  ! MPI must be initialised. A handle that names no communicator is
  ! CLT_EINVAL; a library built without MPI gives CLT_EUNSUPPORTED (use
  ! clt_comm_create_local).
  function clt_comm_create(comm, out) result(rc)
    integer, intent(in) :: comm
    type(clt_comm_t), intent(out) :: out
    integer(c_int) :: rc
    call begin()
    rc = c_comm_create_f(int(comm, c_int), out%p)
  end function clt_comm_create

  ! A one-rank communicator (no MPI involved).
  function clt_comm_create_local(out) result(rc)
    type(clt_comm_t), intent(out) :: out
    integer(c_int) :: rc
    call begin()
    rc = c_comm_create_local(out%p)
  end function clt_comm_create_local

  ! Destroy it before MPI_Finalize.
  subroutine clt_comm_destroy(comm)
    type(clt_comm_t), intent(inout) :: comm
    call c_comm_destroy(comm%p)
    comm%p = c_null_ptr
  end subroutine clt_comm_destroy

  function clt_comm_rank(comm) result(r)
    type(clt_comm_t), intent(in) :: comm
    integer :: r
    r = c_comm_rank(comm%p)
  end function clt_comm_rank

  function clt_comm_size(comm) result(r)
    type(clt_comm_t), intent(in) :: comm
    integer :: r
    r = c_comm_size(comm%p)
  end function clt_comm_size

  ! The device (0-based index into devs) this rank uses by default: its rank
  ! on its node modulo the number of devices; negative (CLT_ENODEV) when devs
  ! is empty, CLT_EINVAL when comm or devs was never made.
  function clt_comm_default_device(comm, devs) result(r)
    type(clt_comm_t), intent(in) :: comm
    type(clt_devices_t), intent(in) :: devs
    integer :: r
    call begin()
    r = c_comm_default_device(comm%p, devs%p)
  end function clt_comm_default_device

  ! ---- models ------------------------------------------------------------------

  ! Read a model spec file; a mistake is CLT_EFORMAT with "file:line:col: what".
  function clt_model_load(path, m) result(rc)
    character(len=*), intent(in) :: path
    type(clt_model_t), intent(out) :: m
    integer(c_int) :: rc
    call begin()
    rc = c_model_load(c_str(path), m%p)
  end function clt_model_load

  ! The same from text (lines joined with new_line('a')); name is used in
  ! messages.
  function clt_model_parse(text, name, m) result(rc)
    character(len=*), intent(in) :: text, name
    type(clt_model_t), intent(out) :: m
    integer(c_int) :: rc
    call begin()
    rc = c_model_parse(c_str(text), c_str(name), m%p)
  end function clt_model_parse

  subroutine clt_model_destroy(m)
    type(clt_model_t), intent(inout) :: m
    call c_model_destroy(m%p)
    m%p = c_null_ptr
  end subroutine clt_model_destroy

  ! Floats per sample: the first extent of x.
  function clt_model_input_size(m) result(n)
    type(clt_model_t), intent(in) :: m
    integer(c_int64_t) :: n
    n = c_model_input_size(m%p)
  end function clt_model_input_size

  function clt_model_param_count(m) result(n)
    type(clt_model_t), intent(in) :: m
    integer(c_int64_t) :: n
    n = c_model_param_count(m%p)
  end function clt_model_param_count

  function clt_model_num_classes(m) result(n)
    type(clt_model_t), intent(in) :: m
    integer :: n
    n = c_model_num_classes(m%p)
  end function clt_model_num_classes

  ! Outputs per sample: the classes of a classifier; positions x vocabulary
  ! of a language model.
  function clt_model_outputs(m) result(n)
    type(clt_model_t), intent(in) :: m
    integer(c_int64_t) :: n
    n = c_model_num_classes(m%p)
    if (n == 0) then ! a regression model: one output per target value
       n = c_model_labels_per_sample(m%p)
    else if (c_model_labels_per_sample(m%p) > 1) then
       n = n * c_model_labels_per_sample(m%p)
    end if
  end function clt_model_outputs

  ! Labels per sample (1 for a classifier).
  function clt_model_labels_per_sample(m) result(n)
    type(clt_model_t), intent(in) :: m
    integer :: n
    n = c_model_labels_per_sample(m%p)
  end function clt_model_labels_per_sample

  ! ---- trainers ----------------------------------------------------------------

  ! The library's defaults (SGD, momentum 0.9, learning rate 0.01, batch 64,
  ! seed 42), with the optimizer's own when one is given (CLT_OPT_ADAMW:
  ! weight decay 0.01, no momentum).
  subroutine clt_options_default(o, optimizer)
    type(clt_options_t), intent(out) :: o
    integer(c_int), intent(in), optional :: optimizer
    integer(c_int) :: kind
    kind = -1
    if (present(optimizer)) kind = optimizer
    call c_options_defaults(o, kind)
  end subroutine clt_options_default

  ! Replicas of m on every device of devs, on this rank of comm (which may
  ! be a communicator never made: this process alone). Collective over comm.
  ! opts: clt_options_default's when absent.
  function clt_trainer_create(m, devs, comm, opts, t) result(rc)
    type(clt_model_t), intent(in) :: m
    type(clt_devices_t), intent(in) :: devs
    type(clt_comm_t), intent(in) :: comm
    type(clt_options_t), intent(in), optional :: opts
    type(clt_trainer_t), intent(out) :: t
    integer(c_int) :: rc
    type(clt_options_t) :: o
    call begin()
    if (c_sizeof(o) /= c_options_size()) then
       rc = fail(CLT_EINTERNAL, 'clt_trainer_create: the module''s clt_options_t ('// itoa(int(c_sizeof(o), &
            c_int64_t)) // ' bytes) and the library''s (' // itoa(int(c_options_size(), c_int64_t)) // &
            ' bytes) differ: cltrain.mod and libcltrain_fortran are from different builds')
       return
    end if
    if (present(opts)) then
       o = opts
    else
       call clt_options_default(o)
    end if
    rc = c_trainer_create(m%p, devs%p, comm%p, o, t%p)
    if (rc == CLT_OK) then
       t%input_size = c_model_input_size(m%p)
       t%labels_per_sample = c_model_labels_per_sample(m%p)
       t%outputs = clt_model_outputs(m)
    end if
  end function clt_trainer_create

  subroutine clt_trainer_destroy(t)
    type(clt_trainer_t), intent(inout) :: t
    call c_trainer_destroy(t%p)
    t%p = c_null_ptr
  end subroutine clt_trainer_destroy

  ! One optimizer step on this rank's n = size(x, 2) samples x(input_size, n)
  ! with labels y(n * labels_per_sample); every rank passes its own (n may
  ! differ between ranks and be 0 on some) and the update is the one of all
  ! ranks' samples together. Collective. res (optional) gets the loss,
  ! accuracy and global batch, the same on every rank.
  function clt_trainer_step(t, x, y, res) result(rc)
    type(clt_trainer_t), intent(in) :: t
    real(c_float), intent(in), contiguous :: x(:, :)
    integer(c_int32_t), intent(in), contiguous :: y(:)
    type(clt_step_result_t), intent(out), optional :: res
    integer(c_int) :: rc
    type(clt_step_result_t) :: r
    integer(c_int64_t) :: n
    call begin()
    rc = check_batch(t, 'clt_trainer_step', x, size(y, kind=c_int64_t), .true.)
    if (rc /= CLT_OK) return
    n = size(x, 2, kind=c_int64_t)
    rc = c_trainer_step(t%p, x, y, n, r)
    if (present(res)) res = r
  end function clt_trainer_step

  ! The same step for a regression model (a spec ending `loss mse`, `l1` or
  ! `huber`): targets(outputs, n), one float per output value of each of the
  ! n = size(x, 2) samples. res%rmse gets the RMSE over the global batch.
  function clt_trainer_step_targets(t, x, targets, res) result(rc)
    type(clt_trainer_t), intent(in) :: t
    real(c_float), intent(in), contiguous :: x(:, :), targets(:, :)
    type(clt_step_result_t), intent(out), optional :: res
    integer(c_int) :: rc
    type(clt_step_result_t) :: r
    integer(c_int64_t) :: n
    call begin()
    rc = check_batch(t, 'clt_trainer_step_targets', x, 0_c_int64_t, .false.)
    if (rc /= CLT_OK) return
    n = size(x, 2, kind=c_int64_t)
    if (size(targets, 2, kind=c_int64_t) /= n .or. size(targets, 1, kind=c_int64_t) /= t%labels_per_sample) then
       rc = fail(CLT_EINVAL, 'clt_trainer_step_targets: targets is ' // itoa(size(targets, 1, kind=c_int64_t)) // &
            ' x ' // itoa(size(targets, 2, kind=c_int64_t)) // ' but the ' // itoa(n) // ' samples of x need ' // &
            itoa(t%labels_per_sample) // ' x ' // itoa(n) // ' (targets(outputs, n))')
       return
    end if
    rc = c_trainer_step_targets(t%p, x, targets, n, size(targets, kind=c_int64_t), r)
    if (present(res)) res = r
  end function clt_trainer_step_targets

  ! The model's output for the n = size(x, 2) samples of x(input_size, n)
  ! into out(outputs, n) (outputs = clt_trainer_outputs: the classes of a
  ! classifier): the forward pass of this rank's first replica, dropout off.
  ! With labels y, loss gets their summed loss. Not collective.
  function clt_trainer_predict(t, x, out, y, loss) result(rc)
    type(clt_trainer_t), intent(in) :: t
    real(c_float), intent(in), contiguous :: x(:, :)
    real(c_float), intent(inout), contiguous, target :: out(:, :)
    integer(c_int32_t), intent(in), optional, contiguous, target :: y(:)
    real(c_double), intent(out), optional :: loss
    integer(c_int) :: rc
    real(c_double) :: l
    type(c_ptr) :: yp
    integer(c_int64_t) :: n
    call begin()
    yp = c_null_ptr
    if (present(y)) then
       rc = check_batch(t, 'clt_trainer_predict', x, size(y, kind=c_int64_t), .true.)
       if (size(y) > 0) yp = c_loc(y)
    else
       rc = check_batch(t, 'clt_trainer_predict', x, 0_c_int64_t, .false.)
    end if
    if (rc /= CLT_OK) return
    n = size(x, 2, kind=c_int64_t)
    if (size(out, 2, kind=c_int64_t) /= n) then
       rc = fail(CLT_ESHAPE, 'clt_trainer_predict: out has ' // itoa(size(out, 2, kind=c_int64_t)) // &
            ' columns for the ' // itoa(n) // ' samples of x: out(outputs, n) takes one column per sample')
       return
    end if
    if (size(out, 1, kind=c_int64_t) /= t%outputs) then
       rc = fail(CLT_ESHAPE, 'clt_trainer_predict: out has ' // itoa(size(out, 1, kind=c_int64_t)) // &
            ' rows but the model gives ' // itoa(t%outputs) // ' outputs per sample: out(outputs, n)')
       return
    end if
    if (n == 0) then
       rc = fail(CLT_EINVAL, 'clt_trainer_predict: x holds no samples (size(x, 2) is 0)')
       return
    end if
    rc = c_trainer_forward(t%p, x, yp, n, out, size(out, kind=c_int64_t), l)
    if (present(loss)) loss = l
  end function clt_trainer_predict

  ! The outputs per sample of the trainer's model: the first extent of
  ! predict's out.
  function clt_trainer_outputs(t) result(n)
    type(clt_trainer_t), intent(in) :: t
    integer(c_int64_t) :: n
    n = t%outputs
  end function clt_trainer_outputs

  ! x(input_size, n) and y(n * labels_per_sample) for the trainer's model.
  function check_batch(t, fn, x, ny, with_y) result(rc)
    type(clt_trainer_t), intent(in) :: t
    character(len=*), intent(in) :: fn
    real(c_float), intent(in) :: x(:, :)
    integer(c_int64_t), intent(in) :: ny
    logical, intent(in) :: with_y
    integer(c_int) :: rc
    integer(c_int64_t) :: insz, lps, n
    rc = CLT_OK
    if (.not. c_associated(t%p)) then
       rc = fail(CLT_EINVAL, fn // ': the trainer t was never made (clt_trainer_create)')
       return
    end if
    insz = t%input_size
    lps = t%labels_per_sample
    n = size(x, 2, kind=c_int64_t)
    if (size(x, 1, kind=c_int64_t) /= insz) then
       rc = fail(CLT_EINVAL, fn // ': x has ' // itoa(size(x, 1, kind=c_int64_t)) // &
            ' rows but the model takes ' // itoa(insz) // ' floats per sample: x(input_size, n), one column per sample')
    else if (with_y .and. ny /= n * lps) then
       rc = fail(CLT_EINVAL, fn // ': y has ' // itoa(ny) // ' labels for the ' // itoa(n) // &
            ' samples of x, which need ' // itoa(n * lps) // ' (' // itoa(lps) // ' per sample)')
    end if
  end function check_batch

  ! A copy of the parameters into p(1 : clt_model_param_count).
  function clt_trainer_params(t, p) result(rc)
    type(clt_trainer_t), intent(in) :: t
    real(c_float), intent(inout), contiguous :: p(:)
    integer(c_int) :: rc
    call begin()
    rc = c_trainer_params(t%p, p, size(p, kind=c_int64_t))
  end function clt_trainer_params

  function clt_trainer_steps_done(t) result(n)
    type(clt_trainer_t), intent(in) :: t
    integer(c_int64_t) :: n
    n = c_trainer_steps_done(t%p)
  end function clt_trainer_steps_done

  ! The parameters as a .safetensors file PyTorch loads (rank 0 writes;
  ! collective), and back (rank 0 reads and broadcasts; collective).
  function clt_trainer_save_weights(t, path) result(rc)
    type(clt_trainer_t), intent(in) :: t
    character(len=*), intent(in) :: path
    integer(c_int) :: rc
    call begin()
    rc = c_save_weights(t%p, c_str(path))
  end function clt_trainer_save_weights

  function clt_trainer_load_weights(t, path) result(rc)
    type(clt_trainer_t), intent(in) :: t
    character(len=*), intent(in) :: path
    integer(c_int) :: rc
    call begin()
    rc = c_load_weights(t%p, c_str(path))
  end function clt_trainer_load_weights

  ! Everything a run needs to go on where it stopped (parameters, optimizer
  ! state, step count); collective, as the weights.
  function clt_trainer_save_checkpoint(t, path) result(rc)
    type(clt_trainer_t), intent(in) :: t
    character(len=*), intent(in) :: path
    integer(c_int) :: rc
    call begin()
    rc = c_save_checkpoint(t%p, c_str(path))
  end function clt_trainer_save_checkpoint

  function clt_trainer_load_checkpoint(t, path) result(rc)
    type(clt_trainer_t), intent(in) :: t
    character(len=*), intent(in) :: path
    integer(c_int) :: rc
    call begin()
    rc = c_load_checkpoint(t%p, c_str(path))
  end function clt_trainer_load_checkpoint

  ! ---- datasets (Fashion-MNIST and other IDX files) ----------------------------

  ! The IDX files of split "train" or "test" in dir (plain or .gz).
  function clt_dataset_open_idx(dir, split, ds) result(rc)
    character(len=*), intent(in) :: dir, split
    type(clt_dataset_t), intent(out) :: ds
    integer(c_int) :: rc
    call begin()
    rc = c_dataset_open_idx(c_str(dir), c_str(split), ds%p)
  end function clt_dataset_open_idx

  subroutine clt_dataset_destroy(ds)
    type(clt_dataset_t), intent(inout) :: ds
    call c_dataset_destroy(ds%p)
    ds%p = c_null_ptr
  end subroutine clt_dataset_destroy

  function clt_dataset_count(ds) result(n)
    type(clt_dataset_t), intent(in) :: ds
    integer(c_int64_t) :: n
    n = c_dataset_count(ds%p)
  end function clt_dataset_count

  function clt_dataset_sample_size(ds) result(n)
    type(clt_dataset_t), intent(in) :: ds
    integer(c_int64_t) :: n
    n = c_dataset_sample_size(ds%p)
  end function clt_dataset_sample_size

  ! Mean and standard deviation of the [0, 1]-scaled values.
  function clt_dataset_stats(ds, mean, std) result(rc)
    type(clt_dataset_t), intent(in) :: ds
    real(c_float), intent(out) :: mean, std
    integer(c_int) :: rc
    call begin()
    rc = c_dataset_stats(ds%p, mean, std)
  end function clt_dataset_stats

  ! Samples are taken as (x - mean) / std from now on.
  function clt_dataset_normalize(ds, mean, std) result(rc)
    type(clt_dataset_t), intent(in) :: ds
    real(c_float), intent(in) :: mean, std
    integer(c_int) :: rc
    call begin()
    rc = c_dataset_normalize(ds%p, mean, std)
  end function clt_dataset_normalize

  ! Samples indices(:) (0-based) into x(sample_size, n) and their labels
  ! into y(n * labels_per_sample).
  function clt_dataset_get_batch(ds, indices, x, y) result(rc)
    type(clt_dataset_t), intent(in) :: ds
    integer(c_int64_t), intent(in), contiguous :: indices(:)
    real(c_float), intent(inout), contiguous :: x(:, :)
    integer(c_int32_t), intent(inout), contiguous :: y(:)
    integer(c_int) :: rc
    integer(c_int64_t) :: n
    call begin()
    n = size(indices, kind=c_int64_t)
    if (size(x, 1, kind=c_int64_t) /= c_dataset_sample_size(ds%p) .or. size(x, 2, kind=c_int64_t) /= n) then
       rc = fail(CLT_EINVAL, 'clt_dataset_get_batch: x is (' // itoa(size(x, 1, kind=c_int64_t)) // ', ' // &
            itoa(size(x, 2, kind=c_int64_t)) // ') but the ' // itoa(n) // ' indices need (' // &
            itoa(c_dataset_sample_size(ds%p)) // ', ' // itoa(n) // ')')
       return
    end if
    if (size(y, kind=c_int64_t) /= n * c_dataset_labels_per_sample(ds%p)) then
       rc = fail(CLT_EINVAL, 'clt_dataset_get_batch: y has ' // itoa(size(y, kind=c_int64_t)) // &
            ' labels but the ' // itoa(n) // ' indices need ' // itoa(n * c_dataset_labels_per_sample(ds%p)))
       return
    end if
    rc = c_dataset_get_batch(ds%p, indices, n, x, y)
  end function clt_dataset_get_batch

end module cltrain
