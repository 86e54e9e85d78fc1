! cltrain.f90: the Fortran 2008 module of libcltrain (use cltrain), over the
! public C API through ISO_C_BINDING: devices, communicators (from a Fortran
! MPI handle), models, training options (every field of clt_train_options,
! clt_options_t), a trainer driven one step at a time on the program's own
! arrays (labels or float targets) or by fit over datasets with evaluate,
! events to a Fortran callback, prediction, gradients, weights,
! checkpoints, traces and datasets (IDX, raw, CSV, NumPy, HDF5). What the
! module leaves to C: OpenCL and MPI interop, collectives, tokenizers,
! Hugging Face import and export, samplers and prefetchers (libcltrain(3)).
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
     ! the options the trainer was made with, whose strings and arrays it
     ! reads as long as it lives
     type(c_ptr) :: options = c_null_ptr, holder = c_null_ptr
  end type clt_trainer_t
  type, public :: clt_dataset_t
     type(c_ptr) :: p = c_null_ptr
  end type clt_dataset_t

  ! kinds of the training options' fields (cltrain.h's enums)
  integer(c_int), parameter, public :: CLT_BALANCE_EQUAL = 0, CLT_BALANCE_WEIGHTS = 1, CLT_BALANCE_AUTO = 2
  integer(c_int), parameter, public :: CLT_PIPELINE_1F1B = 0, CLT_PIPELINE_GPIPE = 1
  integer(c_int), parameter, public :: CLT_OFFLOAD_NONE = 0, CLT_OFFLOAD_OPTIMIZER = 1
  integer(c_int), parameter, public :: CLT_SHARD_EQUAL = 0, CLT_SHARD_MEMORY = 1, CLT_SHARD_WEIGHTS = 2
  integer(c_int), parameter, public :: CLT_RECOMPUTE_NONE = 0, CLT_RECOMPUTE_BLOCKS = 1
  integer(c_int), parameter, public :: CLT_EVENT_STEP = 0, CLT_EVENT_EPOCH = 1, CLT_EVENT_PROGRESS = 2
  integer(c_int), parameter, public :: CLT_OUTPUT_FILE = 0, CLT_OUTPUT_APPEND = 1, CLT_OUTPUT_DIR = 2
  integer(c_int), parameter, public :: CLT_LOSS_CROSSENTROPY = 0, CLT_LOSS_MSE = 1, CLT_LOSS_L1 = 2, CLT_LOSS_HUBER = 3
  integer(c_int), parameter, public :: CLT_NORMALIZE_NONE = 0, CLT_NORMALIZE_STANDARD = 1, CLT_NORMALIZE_MINMAX = 2
  integer(c_int), parameter, public :: CLT_LOG_NONE = 0, CLT_LOG_ERROR = 1, CLT_LOG_WARN = 2, CLT_LOG_INFO = 3, &
       CLT_LOG_DEBUG = 4, CLT_LOG_TRACE = 5

  ! What a trainer reports as it goes (clt_train_event of cltrain.h): to
  ! opts%callback on rank 0, for every step record (every opts%log_every
  ! steps), every epoch and, with opts%progress_s, timed progress. NaN marks
  ! what an event does not carry. The per-replica arrays are allocated when
  ! the event carries them (nreplicas long), else left unallocated.
  type, public :: clt_event_t
     integer(c_int) :: kind = CLT_EVENT_STEP     ! CLT_EVENT_STEP, _EPOCH or _PROGRESS
     integer(c_int64_t) :: epoch = 0, epochs = 0 ! 1-based epoch, and how many
     integer(c_int64_t) :: step = 0, steps_total = 0, step_in_epoch = 0, steps_per_epoch = 0
     real(c_double) :: loss = 0, accuracy = 0, lr = 0, samples_per_s = 0, elapsed_s = 0, eta_s = 0
     real(c_double) :: test_loss = 0, test_accuracy = 0, grad_norm = 0, comm_s = 0, comm_hidden = 0
     real(c_double) :: loss_scale = 0, tokens_per_s = 0, prefetch_wait_s = 0, flops_per_sample = 0, comm_bytes = 0
     integer(c_int64_t) :: skipped = 0           ! steps skipped for a non-finite f16 gradient, in all
     integer(c_int) :: nreplicas = 0             ! replicas of all ranks, and for each:
     integer(c_int64_t), allocatable :: shares(:)  ! its share of the global batch
     real(c_double), allocatable :: throughput(:), fixed_s(:), per_sample_s(:), flops(:), peak_flops(:), mfu(:)
  end type clt_event_t

  ! The callback: any subroutine of this interface (module procedure,
  ! internal procedure, external). user is opts%callback_user.
  abstract interface
     subroutine clt_event_callback(ev, user)
       import :: clt_event_t, c_ptr
       type(clt_event_t), intent(in) :: ev
       type(c_ptr), intent(in) :: user
     end subroutine clt_event_callback
  end interface
  public :: clt_event_callback

  ! Training options: every field of cltrain.h's clt_train_options, with its
  ! default, as a Fortran type: set the components you need (opts%zero = 1,
  ! opts%metrics_path = 'run.jsonl', opts%balance_weights = [2d0, 1d0]). A
  ! string or array left unallocated is the library's NULL; trailing blanks
  ! of a string are trimmed. It is deliberately NOT a bind(C) mirror of the C
  ! struct (pointers, a callback, nested structs and fields appended as the
  ! library grows would make a mirror read the wrong offsets without a
  ! word): clt_trainer_create hands each component to the C shim by name
  ! (options_transfer, the one list here; the shim's table is the one list
  ! there, held to the struct's bytes by tests/fortran/options_check.c).
  ! Names are the C fields' except the nested ones, flattened:
  ! optimizer (optimizer.kind), momentum, nesterov, weight_decay, beta1,
  ! beta2, eps (optimizer.*), schedule (schedule.kind), lr, warmup_steps,
  ! total_steps, step_size, gamma, min_lr (schedule.*); balance_nweights and
  ! shard_nweights are the arrays' sizes. clt_options_default fills it from
  ! the library itself; the initial values here are the same (the test
  ! checks).
  type, public :: clt_options_t
     integer(c_int64_t) :: batch = 64          ! global batch per optimizer step (all ranks' samples)
     integer(c_int32_t) :: epochs = 10         ! fit: passes over the training set
     integer(c_int64_t) :: max_steps = 0       ! fit: stop after this many steps; 0: no limit
     integer(c_int32_t) :: accumulate = 1      ! micro-batches per step
     integer(c_int32_t) :: optimizer = 0       ! CLT_OPT_*
     real(c_float) :: momentum = 0.9
     integer(c_int32_t) :: nesterov = 0
     real(c_float) :: weight_decay = 0
     real(c_float) :: beta1 = 0.9, beta2 = 0.999, eps = 1e-8
     integer(c_int32_t) :: schedule = 0        ! CLT_SCHED_*
     real(c_float) :: lr = 0.01
     integer(c_int64_t) :: warmup_steps = 0    ! linear warm-up
     integer(c_int64_t) :: total_steps = 0     ! cosine: the whole run
     integer(c_int64_t) :: step_size = 0       ! step schedule: steps between decays
     real(c_float) :: gamma = 0.1              ! step schedule: decay factor
     real(c_float) :: min_lr = 0               ! cosine: final learning rate
     real(c_float) :: clip = 0                 ! global-norm clipping; 0: off
     integer(c_int32_t) :: decay_all = 0       ! AdamW: decay every parameter
     integer(c_int64_t) :: seed = 42           ! initialisation, shuffling and dropout
     integer(c_int64_t) :: eval_every = 0      ! fit: also evaluate every N steps
     integer(c_int64_t) :: log_every = 50      ! fit: a step event every N steps
     character(len=:), allocatable :: metrics_path    ! fit: JSON Lines appended by rank 0
     character(len=:), allocatable :: tensorboard_dir ! fit: TensorBoard event files
     integer(c_int32_t) :: drop_last = 0       ! fit: leave out each epoch's last partial batch
     procedure(clt_event_callback), pointer, nopass :: callback => null() ! fit: called on rank 0 per event
     type(c_ptr) :: callback_user = c_null_ptr ! handed to the callback
     real(c_double) :: bucket_mb = 1           ! gradient bucket, MiB
     integer(c_int32_t) :: balance = 0         ! CLT_BALANCE_*
     real(c_double), allocatable :: balance_weights(:) ! CLT_BALANCE_WEIGHTS: one per replica of all ranks
     integer(c_int64_t) :: balance_every = 10  ! CLT_BALANCE_AUTO: re-split every N steps
     integer(c_int64_t) :: balance_min_share = 0
     integer(c_int64_t) :: check_every = 100   ! compare the replicas' parameters every N steps
     character(len=:), allocatable :: checkpoint_dir  ! fit: DIR/ckpt-<step>.safetensors
     integer(c_int64_t) :: checkpoint_every = 0 ! every N steps; 0: each epoch's end
     integer(c_int32_t) :: checkpoint_keep = 3 ! keep the newest K; 0: all
     integer(c_int32_t) :: precision = 0       ! CLT_F32 or CLT_F16
     real(c_float) :: loss_scale = 65536       ! CLT_F16: first dynamic loss scale
     integer(c_int64_t) :: loss_scale_window = 2000
     integer(c_int32_t) :: max_skips = 20
     integer(c_int64_t) :: max_device_memory = 0 ! bytes a replica may use; 0: all
     integer(c_int32_t) :: zero = 0            ! ZeRO stage 0..3
     integer(c_int32_t) :: pipeline = 0        ! pipeline stages; 0 or 1: none
     integer(c_int32_t) :: micro_batches = 0   ! pipeline: micro-batches per step; 0: the stages
     integer(c_int32_t) :: pipeline_schedule = 0 ! CLT_PIPELINE_*
     character(len=:), allocatable :: stages  ! pipeline: "4,4,4", "auto"; unallocated: even
     integer(c_int32_t) :: checkpoint_one_file = 0
     real(c_double) :: progress_s = 0          ! fit: a PROGRESS event every so many seconds; 0: never
     character(len=:), allocatable :: run_json ! a JSON object the metrics' run record takes too
     integer(c_int32_t) :: offload = 0         ! CLT_OFFLOAD_*
     integer(c_int32_t) :: shard_by = 0        ! CLT_SHARD_*
     real(c_double), allocatable :: shard_weights(:) ! CLT_SHARD_WEIGHTS: one per rank
     integer(c_int32_t) :: recompute = 0       ! CLT_RECOMPUTE_*
  end type clt_options_t

  ! The library's clt_train_options that a clt_options_t becomes
  ! (clt_options_to_c), for C functions that take one: p is a
  ! `const clt_train_options *`, valid until clt_c_options_destroy.
  type, public :: clt_c_options_t
     type(c_ptr) :: p = c_null_ptr
     type(c_ptr) :: holder = c_null_ptr ! the callback's, when one is set
  end type clt_c_options_t

  ! The shim's event (clt_f_event in cltrain_shim.c, field for field).
  type, bind(C) :: c_event_t
     integer(c_int64_t) :: epoch, epochs, step, steps_total, step_in_epoch, steps_per_epoch, skipped
     real(c_double) :: loss, accuracy, lr, samples_per_s, elapsed_s, eta_s, test_loss, test_accuracy, grad_norm, &
          comm_s, comm_hidden, loss_scale, tokens_per_s, prefetch_wait_s, flops_per_sample, comm_bytes
     type(c_ptr) :: shares, throughput, fixed_s, per_sample_s, flops, peak_flops, mfu
     integer(c_int32_t) :: kind, nreplicas
  end type c_event_t

  ! What c_loc hands the shim as the callback's user: the procedure and the
  ! caller's pointer.
  type :: callback_holder
     procedure(clt_event_callback), pointer, nopass :: fn => null()
     type(c_ptr) :: user = c_null_ptr
  end type callback_holder

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
  public :: clt_options_default, clt_options_to_c, clt_c_options_destroy
  public :: clt_trainer_create, clt_trainer_destroy, clt_trainer_step, clt_trainer_step_targets, clt_trainer_predict
  public :: clt_trainer_params
  public :: clt_trainer_steps_done, clt_trainer_outputs
  public :: clt_trainer_save_weights, clt_trainer_load_weights, clt_trainer_save_checkpoint
  public :: clt_trainer_load_checkpoint
  public :: clt_dataset_open_idx, clt_dataset_destroy, clt_dataset_count, clt_dataset_sample_size
  public :: clt_dataset_stats, clt_dataset_normalize, clt_dataset_get_batch
  public :: clt_trainer_fit, clt_trainer_evaluate, clt_trainer_predict_targets, clt_trainer_gradient
  public :: clt_trainer_gradient_targets, clt_trainer_replicas, clt_trainer_stages, clt_trainer_resume_latest
  public :: clt_trainer_trace_start, clt_trainer_trace_save, clt_checkpoint_export, clt_check_output
  public :: clt_log_set_level, clt_log_get_level
  public :: clt_dataset_open, clt_dataset_open_raw, clt_dataset_write_raw, clt_dataset_split
  public :: clt_dataset_num_classes, clt_dataset_targets_per_sample, clt_dataset_labels_per_sample
  public :: clt_dataset_get_batch_targets
  public :: clt_model_layer_count, clt_model_vocab, clt_model_loss, clt_model_text, clt_model_summary
  public :: clt_comm_set_timeout, clt_comm_timeout, clt_checkpoint_path, clt_trainer_set_normalization
  public :: clt_dataset_normalize_features, clt_dataset_feature_normalization, clt_dataset_label_count
  public :: clt_dataset_sample_shape, clt_dataset_open_idx_files

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
     function c_shim_error() bind(C, name="clt_f_error") result(p)
       import :: c_ptr
       type(c_ptr) :: p
     end function c_shim_error
     function c_options_create(optimizer, out) bind(C, name="clt_f_options_create") result(rc)
       import :: c_ptr, c_int
       integer(c_int), value :: optimizer
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_options_create
     subroutine c_options_destroy(h) bind(C, name="clt_f_options_destroy")
       import :: c_ptr
       type(c_ptr), value :: h
     end subroutine c_options_destroy
     function c_options_set_int(h, name, v) bind(C, name="clt_f_options_set_int") result(rc)
       import :: c_ptr, c_int, c_char, c_int64_t
       type(c_ptr), value :: h
       character(kind=c_char), intent(in) :: name(*)
       integer(c_int64_t), value :: v
       integer(c_int) :: rc
     end function c_options_set_int
     function c_options_get_int(h, name, v) bind(C, name="clt_f_options_get_int") result(rc)
       import :: c_ptr, c_int, c_char, c_int64_t
       type(c_ptr), value :: h
       character(kind=c_char), intent(in) :: name(*)
       integer(c_int64_t), intent(out) :: v
       integer(c_int) :: rc
     end function c_options_get_int
     function c_options_set_real(h, name, v) bind(C, name="clt_f_options_set_real") result(rc)
       import :: c_ptr, c_int, c_char, c_double
       type(c_ptr), value :: h
       character(kind=c_char), intent(in) :: name(*)
       real(c_double), value :: v
       integer(c_int) :: rc
     end function c_options_set_real
     function c_options_get_real(h, name, v) bind(C, name="clt_f_options_get_real") result(rc)
       import :: c_ptr, c_int, c_char, c_double
       type(c_ptr), value :: h
       character(kind=c_char), intent(in) :: name(*)
       real(c_double), intent(out) :: v
       integer(c_int) :: rc
     end function c_options_get_real
     function c_options_set_string(h, name, v, n, present) bind(C, name="clt_f_options_set_string") result(rc)
       import :: c_ptr, c_int, c_char, c_int64_t
       type(c_ptr), value :: h
       character(kind=c_char), intent(in) :: name(*), v(*)
       integer(c_int64_t), value :: n
       integer(c_int), value :: present
       integer(c_int) :: rc
     end function c_options_set_string
     function c_options_set_reals(h, name, v, n, present) bind(C, name="clt_f_options_set_reals") result(rc)
       import :: c_ptr, c_int, c_char, c_int64_t, c_double
       type(c_ptr), value :: h
       character(kind=c_char), intent(in) :: name(*)
       real(c_double), intent(in) :: v(*)
       integer(c_int64_t), value :: n
       integer(c_int), value :: present
       integer(c_int) :: rc
     end function c_options_set_reals
     subroutine c_options_set_callback(h, fn, user) bind(C, name="clt_f_options_set_callback")
       import :: c_ptr, c_funptr
       type(c_ptr), value :: h
       type(c_funptr), value :: fn
       type(c_ptr), value :: user
     end subroutine c_options_set_callback
     function c_trainer_create(m, devs, comm, h, out) bind(C, name="clt_f_trainer_create") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: m, devs, comm, h
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
     ! fit, evaluate and the rest of the trainer
     function c_trainer_fit(t, train, test) bind(C, name="clt_trainer_fit") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: t, train, test
       integer(c_int) :: rc
     end function c_trainer_fit
     function c_trainer_evaluate(t, ds, loss, accuracy) bind(C, name="clt_trainer_evaluate") result(rc)
       import :: c_ptr, c_int, c_double
       type(c_ptr), value :: t, ds
       real(c_double), intent(out) :: loss, accuracy
       integer(c_int) :: rc
     end function c_trainer_evaluate
     function c_trainer_forward_targets(t, x, targets, n, out, count, loss, sq_error) &
          bind(C, name="clt_trainer_forward_targets") result(rc)
       import :: c_ptr, c_int, c_int64_t, c_float, c_double
       type(c_ptr), value :: t, targets
       real(c_float), intent(in) :: x(*)
       integer(c_int64_t), value :: n, count
       real(c_float), intent(inout) :: out(*)
       real(c_double), intent(out) :: loss, sq_error
       integer(c_int) :: rc
     end function c_trainer_forward_targets
     function c_trainer_gradient(t, x, y, n, grad, count, loss) bind(C, name="clt_trainer_gradient") result(rc)
       import :: c_ptr, c_int, c_int64_t, c_float, c_double, c_int32_t
       type(c_ptr), value :: t
       real(c_float), intent(in) :: x(*)
       integer(c_int32_t), intent(in) :: y(*)
       integer(c_int64_t), value :: n, count
       real(c_float), intent(inout) :: grad(*)
       real(c_double), intent(out) :: loss
       integer(c_int) :: rc
     end function c_trainer_gradient
     function c_trainer_gradient_targets(t, x, targets, n, grad, count, loss) &
          bind(C, name="clt_trainer_gradient_targets") result(rc)
       import :: c_ptr, c_int, c_int64_t, c_float, c_double
       type(c_ptr), value :: t
       real(c_float), intent(in) :: x(*), targets(*)
       integer(c_int64_t), value :: n, count
       real(c_float), intent(inout) :: grad(*)
       real(c_double), intent(out) :: loss
       integer(c_int) :: rc
     end function c_trainer_gradient_targets
     function c_trainer_replicas(t) bind(C, name="clt_trainer_replicas") result(n)
       import :: c_ptr, c_int
       type(c_ptr), value :: t
       integer(c_int) :: n
     end function c_trainer_replicas
     function c_trainer_stages(t, lines, cap) bind(C, name="clt_trainer_stages") result(n)
       import :: c_ptr, c_int
       type(c_ptr), value :: t
       integer(c_int), intent(inout) :: lines(*)
       integer(c_int), value :: cap
       integer(c_int) :: n
     end function c_trainer_stages
     function c_trainer_resume_latest(t, dir, loaded, size) bind(C, name="clt_trainer_resume_latest") result(rc)
       import :: c_ptr, c_int, c_char, c_size_t
       type(c_ptr), value :: t
       character(kind=c_char), intent(in) :: dir(*)
       character(kind=c_char), intent(inout) :: loaded(*)
       integer(c_size_t), value :: size
       integer(c_int) :: rc
     end function c_trainer_resume_latest
     function c_trainer_trace_start(t) bind(C, name="clt_trainer_trace_start") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: t
       integer(c_int) :: rc
     end function c_trainer_trace_start
     function c_trainer_trace_save(t, path) bind(C, name="clt_trainer_trace_save") result(rc)
       import :: c_ptr, c_int, c_char
       type(c_ptr), value :: t
       character(kind=c_char), intent(in) :: path(*)
       integer(c_int) :: rc
     end function c_trainer_trace_save
     function c_checkpoint_export(ckpt, out) bind(C, name="clt_checkpoint_export") result(rc)
       import :: c_int, c_char
       character(kind=c_char), intent(in) :: ckpt(*), out(*)
       integer(c_int) :: rc
     end function c_checkpoint_export
     function c_check_output(path, kind) bind(C, name="clt_check_output") result(rc)
       import :: c_int, c_char
       character(kind=c_char), intent(in) :: path(*)
       integer(c_int), value :: kind
       integer(c_int) :: rc
     end function c_check_output
     subroutine c_log_set_level(level) bind(C, name="clt_log_set_level")
       import :: c_int
       integer(c_int), value :: level
     end subroutine c_log_set_level
     function c_log_get_level() bind(C, name="clt_log_get_level") result(level)
       import :: c_int
       integer(c_int) :: level
     end function c_log_get_level
     ! users' own data
     function c_dataset_open(path, labels, target, features, regression, num_classes, out) &
          bind(C, name="clt_f_dataset_open") result(rc)
       import :: c_ptr, c_int, c_char
       character(kind=c_char), intent(in) :: path(*)
       type(c_ptr), value :: labels, target, features
       integer(c_int), value :: regression, num_classes
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_dataset_open
     function c_dataset_open_raw(path, out) bind(C, name="clt_dataset_open_raw") result(rc)
       import :: c_ptr, c_int, c_char
       character(kind=c_char), intent(in) :: path(*)
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_dataset_open_raw
     function c_dataset_write_raw(path, count, ndims, dims, num_classes, x, y) &
          bind(C, name="clt_dataset_write_raw") result(rc)
       import :: c_int, c_char, c_int64_t, c_float, c_int32_t
       character(kind=c_char), intent(in) :: path(*)
       integer(c_int64_t), value :: count
       integer(c_int), value :: ndims, num_classes
       integer(c_int64_t), intent(in) :: dims(*)
       real(c_float), intent(in) :: x(*)
       integer(c_int32_t), intent(in) :: y(*)
       integer(c_int) :: rc
     end function c_dataset_write_raw
     function c_dataset_split(ds, fraction, val) bind(C, name="clt_dataset_split") result(rc)
       import :: c_ptr, c_int, c_double
       type(c_ptr), value :: ds
       real(c_double), value :: fraction
       type(c_ptr), intent(out) :: val
       integer(c_int) :: rc
     end function c_dataset_split
     function c_dataset_num_classes(ds) bind(C, name="clt_dataset_num_classes") result(n)
       import :: c_ptr, c_int
       type(c_ptr), value :: ds
       integer(c_int) :: n
     end function c_dataset_num_classes
     function c_dataset_targets_per_sample(ds) bind(C, name="clt_dataset_targets_per_sample") result(n)
       import :: c_ptr, c_int64_t
       type(c_ptr), value :: ds
       integer(c_int64_t) :: n
     end function c_dataset_targets_per_sample
     function c_dataset_get_batch_targets(ds, indices, n, x, targets) &
          bind(C, name="clt_dataset_get_batch_targets") result(rc)
       import :: c_ptr, c_int, c_int64_t, c_float
       type(c_ptr), value :: ds
       integer(c_int64_t), intent(in) :: indices(*)
       integer(c_int64_t), value :: n
       real(c_float), intent(inout) :: x(*), targets(*)
       integer(c_int) :: rc
     end function c_dataset_get_batch_targets
     ! more of models, communicators, normalisation and datasets
     subroutine c_free(p) bind(C, name="free")
       import :: c_ptr
       type(c_ptr), value :: p
     end subroutine c_free
     function c_model_layer_count(m) bind(C, name="clt_model_layer_count") result(n)
       import :: c_ptr, c_int
       type(c_ptr), value :: m
       integer(c_int) :: n
     end function c_model_layer_count
     function c_model_vocab(m) bind(C, name="clt_model_vocab") result(n)
       import :: c_ptr, c_int
       type(c_ptr), value :: m
       integer(c_int) :: n
     end function c_model_vocab
     function c_model_loss(m) bind(C, name="clt_model_loss") result(n)
       import :: c_ptr, c_int
       type(c_ptr), value :: m
       integer(c_int) :: n
     end function c_model_loss
     function c_model_text(m) bind(C, name="clt_model_text") result(p)
       import :: c_ptr
       type(c_ptr), value :: m
       type(c_ptr) :: p
     end function c_model_text
     function c_model_summary(m, out) bind(C, name="clt_model_summary") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: m
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_model_summary
     function c_comm_set_timeout(comm, seconds) bind(C, name="clt_comm_set_timeout") result(rc)
       import :: c_ptr, c_int, c_double
       type(c_ptr), value :: comm
       real(c_double), value :: seconds
       integer(c_int) :: rc
     end function c_comm_set_timeout
     function c_comm_timeout(comm) bind(C, name="clt_comm_timeout") result(s)
       import :: c_ptr, c_double
       type(c_ptr), value :: comm
       real(c_double) :: s
     end function c_comm_timeout
     function c_checkpoint_path(dir, step, out, size) bind(C, name="clt_checkpoint_path") result(rc)
       import :: c_int, c_char, c_int64_t, c_size_t
       character(kind=c_char), intent(in) :: dir(*)
       integer(c_int64_t), value :: step
       character(kind=c_char), intent(inout) :: out(*)
       integer(c_size_t), value :: size
       integer(c_int) :: rc
     end function c_checkpoint_path
     function c_trainer_set_normalization(t, kind, shift, scale) bind(C, name="clt_trainer_set_normalization") &
          result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: t, shift, scale
       integer(c_int), value :: kind
       integer(c_int) :: rc
     end function c_trainer_set_normalization
     function c_dataset_normalize_features(ds, kind, shift, scale) bind(C, name="clt_dataset_normalize_features") &
          result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: ds, shift, scale
       integer(c_int), value :: kind
       integer(c_int) :: rc
     end function c_dataset_normalize_features
     function c_dataset_feature_normalization(ds, shift, scale) bind(C, name="clt_dataset_feature_normalization") &
          result(kind)
       import :: c_ptr, c_int
       type(c_ptr), value :: ds, shift, scale
       integer(c_int) :: kind
     end function c_dataset_feature_normalization
     function c_dataset_label_count(ds) bind(C, name="clt_dataset_label_count") result(n)
       import :: c_ptr, c_int64_t
       type(c_ptr), value :: ds
       integer(c_int64_t) :: n
     end function c_dataset_label_count
     function c_dataset_sample_shape(ds, dims) bind(C, name="clt_dataset_sample_shape") result(n)
       import :: c_ptr, c_int, c_int64_t
       type(c_ptr), value :: ds
       integer(c_int64_t), intent(inout) :: dims(*)
       integer(c_int) :: n
     end function c_dataset_sample_shape
     function c_dataset_open_idx_files(images, labels, num_classes, out) bind(C, name="clt_dataset_open_idx_files") &
          result(rc)
       import :: c_ptr, c_int, c_char
       character(kind=c_char), intent(in) :: images(*), labels(*)
       integer(c_int), value :: num_classes
       type(c_ptr), intent(out) :: out
       integer(c_int) :: rc
     end function c_dataset_open_idx_files
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
  ! seed 42, ...: clt_train_options_defaults), with the optimizer's own when
  ! one is given (CLT_OPT_ADAMW: weight decay 0.01, no momentum). Strings,
  ! arrays and the callback: none.
  subroutine clt_options_default(o, optimizer)
    type(clt_options_t), intent(out) :: o
    integer(c_int), intent(in), optional :: optimizer
    integer(c_int) :: kind, rc
    type(c_ptr) :: h, holder
    kind = -1
    if (present(optimizer)) kind = optimizer
    rc = c_options_create(kind, h)
    if (rc /= CLT_OK) return ! out of memory: the initial values, which are the same
    rc = options_transfer(o, h, .false., holder)
    call c_options_destroy(h)
  end subroutine clt_options_default

  ! The library's clt_train_options that opts becomes, as clt_trainer_create
  ! makes it: c%p is a `const clt_train_options *` for C functions that take
  ! one (clt_model_replica_memory, ...), valid until clt_c_options_destroy(c).
  ! A component the library cannot hold (a path longer than 4095
  ! characters, a count beyond a C int) is CLT_EINVAL naming it, and c is
  ! not made. The values themselves are checked by clt_trainer_create.
  function clt_options_to_c(opts, c) result(rc)
    type(clt_options_t), intent(in) :: opts
    type(clt_c_options_t), intent(out) :: c
    integer(c_int) :: rc
    call begin()
    rc = build_options(opts, c, 'clt_options_to_c')
  end function clt_options_to_c

  function build_options(opts, c, fn) result(rc)
    type(clt_options_t), intent(in) :: opts
    type(clt_c_options_t), intent(out) :: c
    character(len=*), intent(in) :: fn
    integer(c_int) :: rc
    type(clt_options_t) :: o
    o = opts
    rc = c_options_create(-1_c_int, c%p)
    if (rc == CLT_OK) rc = options_transfer(o, c%p, .true., c%holder)
    if (rc /= CLT_OK) then
       rc = fail(rc, fn // ': ' // f_str(c_shim_error()))
       call clt_c_options_destroy(c)
    end if
  end function build_options

  subroutine clt_c_options_destroy(c)
    type(clt_c_options_t), intent(inout) :: c
    type(callback_holder), pointer :: hold
    call c_options_destroy(c%p)
    if (c_associated(c%holder)) then
       call c_f_pointer(c%holder, hold)
       deallocate (hold)
    end if
    c%p = c_null_ptr
    c%holder = c_null_ptr
  end subroutine clt_c_options_destroy

  ! Every component of o to the shim's options object h (to_c), or from it
  ! (its numbers; its strings and arrays are NULL, left unallocated): the
  ! one list of the module's options, in clt_train_options' order. The shim
  ! looks each name up in its table; a name it lacks is CLT_EINTERNAL (the
  ! module and the library from different builds).
  function options_transfer(o, h, to_c, holder) result(rc)
    type(clt_options_t), intent(inout) :: o
    type(c_ptr), intent(in) :: h
    logical, intent(in) :: to_c
    type(c_ptr), intent(out) :: holder
    integer(c_int) :: rc
    type(callback_holder), pointer :: hold
    rc = CLT_OK
    holder = c_null_ptr
    call i8('batch', o%batch)
    call i4('epochs', o%epochs)
    call i8('max_steps', o%max_steps)
    call i4('accumulate', o%accumulate)
    call i4('optimizer', o%optimizer)
    call r4('momentum', o%momentum)
    call i4('nesterov', o%nesterov)
    call r4('weight_decay', o%weight_decay)
    call r4('beta1', o%beta1)
    call r4('beta2', o%beta2)
    call r4('eps', o%eps)
    call i4('schedule', o%schedule)
    call r4('lr', o%lr)
    call i8('warmup_steps', o%warmup_steps)
    call i8('total_steps', o%total_steps)
    call i8('step_size', o%step_size)
    call r4('gamma', o%gamma)
    call r4('min_lr', o%min_lr)
    call r4('clip', o%clip)
    call i4('decay_all', o%decay_all)
    call i8('seed', o%seed)
    call i8('eval_every', o%eval_every)
    call i8('log_every', o%log_every)
    call str('metrics_path', o%metrics_path)
    call str('tensorboard_dir', o%tensorboard_dir)
    call i4('drop_last', o%drop_last)
    if (to_c .and. rc == CLT_OK .and. associated(o%callback)) then ! and callback_user
       allocate (hold)
       hold%fn => o%callback
       hold%user = o%callback_user
       holder = c_loc(hold)
       call c_options_set_callback(h, c_funloc(event_trampoline), holder)
    end if
    call r8('bucket_mb', o%bucket_mb)
    call i4('balance', o%balance)
    call reals('balance_weights', o%balance_weights)
    call i8('balance_every', o%balance_every)
    call i8('balance_min_share', o%balance_min_share)
    call i8('check_every', o%check_every)
    call str('checkpoint_dir', o%checkpoint_dir)
    call i8('checkpoint_every', o%checkpoint_every)
    call i4('checkpoint_keep', o%checkpoint_keep)
    call i4('precision', o%precision)
    call r4('loss_scale', o%loss_scale)
    call i8('loss_scale_window', o%loss_scale_window)
    call i4('max_skips', o%max_skips)
    call i8('max_device_memory', o%max_device_memory)
    call i4('zero', o%zero)
    call i4('pipeline', o%pipeline)
    call i4('micro_batches', o%micro_batches)
    call i4('pipeline_schedule', o%pipeline_schedule)
    call str('stages', o%stages)
    call i4('checkpoint_one_file', o%checkpoint_one_file)
    call r8('progress_s', o%progress_s)
    call str('run_json', o%run_json)
    call i4('offload', o%offload)
    call i4('shard_by', o%shard_by)
    call reals('shard_weights', o%shard_weights)
    call i4('recompute', o%recompute)
  contains
    subroutine i8(name, v)
      character(len=*), intent(in) :: name
      integer(c_int64_t), intent(inout) :: v
      if (rc /= CLT_OK) return
      if (to_c) then
         rc = c_options_set_int(h, c_str(name), v)
      else
         rc = c_options_get_int(h, c_str(name), v)
      end if
    end subroutine i8
    subroutine i4(name, v)
      character(len=*), intent(in) :: name
      integer(c_int32_t), intent(inout) :: v
      integer(c_int64_t) :: w
      w = v
      call i8(name, w)
      if (.not. to_c .and. rc == CLT_OK) v = int(w, c_int32_t)
    end subroutine i4
    subroutine r8(name, v)
      character(len=*), intent(in) :: name
      real(c_double), intent(inout) :: v
      if (rc /= CLT_OK) return
      if (to_c) then
         rc = c_options_set_real(h, c_str(name), v)
      else
         rc = c_options_get_real(h, c_str(name), v)
      end if
    end subroutine r8
    subroutine r4(name, v)
      character(len=*), intent(in) :: name
      real(c_float), intent(inout) :: v
      real(c_double) :: w
      w = v
      call r8(name, w)
      if (.not. to_c .and. rc == CLT_OK) v = real(w, c_float)
    end subroutine r4
    subroutine str(name, v)
      character(len=*), intent(in) :: name
      character(len=:), allocatable, intent(in) :: v
      if (rc /= CLT_OK .or. .not. to_c) return
      if (allocated(v)) then
         rc = c_options_set_string(h, c_str(name), v, int(len_trim(v), c_int64_t), 1_c_int)
      else
         rc = c_options_set_string(h, c_str(name), c_null_char, 0_c_int64_t, 0_c_int)
      end if
    end subroutine str
    subroutine reals(name, v)
      character(len=*), intent(in) :: name
      real(c_double), allocatable, intent(in) :: v(:)
      real(c_double) :: none(1)
      if (rc /= CLT_OK .or. .not. to_c) return
      if (allocated(v)) then
         rc = c_options_set_reals(h, c_str(name), v, size(v, kind=c_int64_t), 1_c_int)
      else
         none = 0
         rc = c_options_set_reals(h, c_str(name), none, 0_c_int64_t, 0_c_int)
      end if
    end subroutine reals
  end function options_transfer

  ! The shim calls this for every event of fit (rank 0): the event as the
  ! module's type, to the caller's procedure. No binding label: reached only
  ! through c_funloc.
  subroutine event_trampoline(cev, user) bind(C, name="")
    type(c_event_t), intent(in) :: cev
    type(c_ptr), value :: user
    type(callback_holder), pointer :: hold
    type(clt_event_t) :: ev
    call c_f_pointer(user, hold)
    ev%kind = cev%kind
    ev%epoch = cev%epoch
    ev%epochs = cev%epochs
    ev%step = cev%step
    ev%steps_total = cev%steps_total
    ev%step_in_epoch = cev%step_in_epoch
    ev%steps_per_epoch = cev%steps_per_epoch
    ev%skipped = cev%skipped
    ev%loss = cev%loss
    ev%accuracy = cev%accuracy
    ev%lr = cev%lr
    ev%samples_per_s = cev%samples_per_s
    ev%elapsed_s = cev%elapsed_s
    ev%eta_s = cev%eta_s
    ev%test_loss = cev%test_loss
    ev%test_accuracy = cev%test_accuracy
    ev%grad_norm = cev%grad_norm
    ev%comm_s = cev%comm_s
    ev%comm_hidden = cev%comm_hidden
    ev%loss_scale = cev%loss_scale
    ev%tokens_per_s = cev%tokens_per_s
    ev%prefetch_wait_s = cev%prefetch_wait_s
    ev%flops_per_sample = cev%flops_per_sample
    ev%comm_bytes = cev%comm_bytes
    ev%nreplicas = cev%nreplicas
    if (cev%nreplicas > 0) then
       call take_i8(cev%shares, ev%shares)
       call take_r8(cev%throughput, ev%throughput)
       call take_r8(cev%fixed_s, ev%fixed_s)
       call take_r8(cev%per_sample_s, ev%per_sample_s)
       call take_r8(cev%flops, ev%flops)
       call take_r8(cev%peak_flops, ev%peak_flops)
       call take_r8(cev%mfu, ev%mfu)
    end if
    call hold%fn(ev, hold%user)
  contains
    subroutine take_i8(p, a)
      type(c_ptr), intent(in) :: p
      integer(c_int64_t), allocatable, intent(out) :: a(:)
      integer(c_int64_t), pointer :: q(:)
      if (.not. c_associated(p)) return
      call c_f_pointer(p, q, [cev%nreplicas])
      a = q
    end subroutine take_i8
    subroutine take_r8(p, a)
      type(c_ptr), intent(in) :: p
      real(c_double), allocatable, intent(out) :: a(:)
      real(c_double), pointer :: q(:)
      if (.not. c_associated(p)) return
      call c_f_pointer(p, q, [cev%nreplicas])
      a = q
    end subroutine take_r8
  end subroutine event_trampoline

  ! Replicas of m on every device of devs, on this rank of comm (which may
  ! be a communicator never made: this process alone). Collective over comm.
  ! opts: clt_options_default's when absent. Every option is checked here
  ! (CLT_EINVAL naming the field and its value: a batch below 1, a ZeRO
  ! stage above 3, a path too long, ...); the trainer keeps the options'
  ! strings and arrays, so opts may change or go afterwards.
  function clt_trainer_create(m, devs, comm, opts, t) result(rc)
    type(clt_model_t), intent(in) :: m
    type(clt_devices_t), intent(in) :: devs
    type(clt_comm_t), intent(in) :: comm
    type(clt_options_t), intent(in), optional :: opts
    type(clt_trainer_t), intent(out) :: t
    integer(c_int) :: rc
    type(clt_options_t) :: o
    type(clt_c_options_t) :: c
    call begin()
    if (present(opts)) then
       o = opts
    else
       call clt_options_default(o)
    end if
    rc = build_options(o, c, 'clt_trainer_create')
    if (rc /= CLT_OK) return
    rc = c_trainer_create(m%p, devs%p, comm%p, c%p, t%p)
    if (rc /= CLT_OK) then
       call clt_c_options_destroy(c)
       return
    end if
    t%options = c%p
    t%holder = c%holder
    t%input_size = c_model_input_size(m%p)
    t%labels_per_sample = c_model_labels_per_sample(m%p)
    t%outputs = clt_model_outputs(m)
  end function clt_trainer_create

  subroutine clt_trainer_destroy(t)
    type(clt_trainer_t), intent(inout) :: t
    type(clt_c_options_t) :: c
    call c_trainer_destroy(t%p)
    t%p = c_null_ptr
    c%p = t%options
    c%holder = t%holder
    call clt_c_options_destroy(c)
    t%options = c_null_ptr
    t%holder = c_null_ptr
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

  ! ---- fit and evaluate: the library's own loop over datasets ----------------

  ! Train on `train` for opts%epochs (or opts%max_steps), evaluating on
  ! `test` (optional) after each epoch: the library's sampler, prefetchers,
  ! events (opts%callback on rank 0, opts%metrics_path, opts%tensorboard_dir)
  ! and checkpoints (opts%checkpoint_dir) around the same step as
  ! clt_trainer_step. A regression model trains on a dataset of float
  ! targets (clt_dataset_open with regression), a classifier on labels.
  ! Collective.
  function clt_trainer_fit(t, train, test) result(rc)
    type(clt_trainer_t), intent(in) :: t
    type(clt_dataset_t), intent(in) :: train
    type(clt_dataset_t), intent(in), optional :: test
    integer(c_int) :: rc
    type(c_ptr) :: tp
    call begin()
    tp = c_null_ptr
    if (present(test)) tp = test%p
    rc = c_trainer_fit(t%p, train%p, tp)
  end function clt_trainer_fit

  ! Mean loss and accuracy over the whole of ds, split across every replica
  ! of every rank; for a regression model the mean loss and, in accuracy,
  ! the RMSE over every target value. Collective.
  function clt_trainer_evaluate(t, ds, loss, accuracy) result(rc)
    type(clt_trainer_t), intent(in) :: t
    type(clt_dataset_t), intent(in) :: ds
    real(c_double), intent(out) :: loss
    real(c_double), intent(out), optional :: accuracy
    integer(c_int) :: rc
    real(c_double) :: a
    call begin()
    rc = c_trainer_evaluate(t%p, ds%p, loss, a)
    if (present(accuracy)) accuracy = a
  end function clt_trainer_evaluate

  ! clt_trainer_predict for a regression model: out(outputs, n); with
  ! targets(outputs, n), loss gets the SUMMED regression loss and sq_error
  ! the summed squared error (sqrt(sq_error / size(targets)) is the RMSE).
  ! Not collective.
  function clt_trainer_predict_targets(t, x, out, targets, loss, sq_error) result(rc)
    type(clt_trainer_t), intent(in) :: t
    real(c_float), intent(in), contiguous :: x(:, :)
    real(c_float), intent(inout), contiguous :: out(:, :)
    real(c_float), intent(in), optional, contiguous, target :: targets(:, :)
    real(c_double), intent(out), optional :: loss, sq_error
    integer(c_int) :: rc
    real(c_double) :: l, e
    type(c_ptr) :: tp
    integer(c_int64_t) :: n
    call begin()
    rc = check_batch(t, 'clt_trainer_predict_targets', x, 0_c_int64_t, .false.)
    if (rc /= CLT_OK) return
    n = size(x, 2, kind=c_int64_t)
    if (size(out, 2, kind=c_int64_t) /= n .or. size(out, 1, kind=c_int64_t) /= t%outputs) then
       rc = fail(CLT_ESHAPE, 'clt_trainer_predict_targets: out is ' // itoa(size(out, 1, kind=c_int64_t)) // ' x ' &
            // itoa(size(out, 2, kind=c_int64_t)) // ' but the ' // itoa(n) // ' samples of x need ' // &
            itoa(t%outputs) // ' x ' // itoa(n) // ' (out(outputs, n))')
       return
    end if
    tp = c_null_ptr
    if (present(targets)) then
       if (size(targets, 1, kind=c_int64_t) /= t%outputs .or. size(targets, 2, kind=c_int64_t) /= n) then
          rc = fail(CLT_EINVAL, 'clt_trainer_predict_targets: targets is ' // itoa(size(targets, 1, kind=c_int64_t)) &
               // ' x ' // itoa(size(targets, 2, kind=c_int64_t)) // ' but out is ' // itoa(t%outputs) // ' x ' // &
               itoa(n) // ': targets(outputs, n)')
          return
       end if
       if (n > 0) tp = c_loc(targets)
    end if
    rc = c_trainer_forward_targets(t%p, x, tp, n, out, size(out, kind=c_int64_t), l, e)
    if (present(loss)) loss = l
    if (present(sq_error)) sq_error = e
  end function clt_trainer_predict_targets

  ! The gradient of the MEAN loss over the n = size(x, 2) samples with labels
  ! y, without an update, into grad(1 : clt_model_param_count) (the layout
  ! of clt_trainer_params); loss (optional) the mean loss. Not collective.
  function clt_trainer_gradient(t, x, y, grad, loss) result(rc)
    type(clt_trainer_t), intent(in) :: t
    real(c_float), intent(in), contiguous :: x(:, :)
    integer(c_int32_t), intent(in), contiguous :: y(:)
    real(c_float), intent(inout), contiguous :: grad(:)
    real(c_double), intent(out), optional :: loss
    integer(c_int) :: rc
    real(c_double) :: l
    call begin()
    rc = check_batch(t, 'clt_trainer_gradient', x, size(y, kind=c_int64_t), .true.)
    if (rc /= CLT_OK) return
    rc = c_trainer_gradient(t%p, x, y, size(x, 2, kind=c_int64_t), grad, size(grad, kind=c_int64_t), l)
    if (present(loss)) loss = l
  end function clt_trainer_gradient

  ! The same for a regression model: targets(outputs, n).
  function clt_trainer_gradient_targets(t, x, targets, grad, loss) result(rc)
    type(clt_trainer_t), intent(in) :: t
    real(c_float), intent(in), contiguous :: x(:, :), targets(:, :)
    real(c_float), intent(inout), contiguous :: grad(:)
    real(c_double), intent(out), optional :: loss
    integer(c_int) :: rc
    real(c_double) :: l
    call begin()
    rc = check_batch(t, 'clt_trainer_gradient_targets', x, 0_c_int64_t, .false.)
    if (rc /= CLT_OK) return
    if (size(targets, 2) /= size(x, 2) .or. size(targets, 1, kind=c_int64_t) /= t%labels_per_sample) then
       rc = fail(CLT_EINVAL, 'clt_trainer_gradient_targets: targets is ' // itoa(size(targets, 1, kind=c_int64_t)) &
            // ' x ' // itoa(size(targets, 2, kind=c_int64_t)) // ' for the ' // itoa(size(x, 2, kind=c_int64_t)) &
            // ' samples of x: targets(outputs, n)')
       return
    end if
    rc = c_trainer_gradient_targets(t%p, x, targets, size(x, 2, kind=c_int64_t), grad, size(grad, kind=c_int64_t), l)
    if (present(loss)) loss = l
  end function clt_trainer_gradient_targets

  ! Replicas on all ranks together (under a pipeline: of this rank's stage).
  function clt_trainer_replicas(t) result(n)
    type(clt_trainer_t), intent(in) :: t
    integer :: n
    n = c_trainer_replicas(t%p)
  end function clt_trainer_replicas

  ! The pipeline's stages P (1 without one); lines (optional, P + 1 long or
  ! more) gets the spec line where each stage starts, then the last line + 1.
  function clt_trainer_stages(t, lines) result(p)
    type(clt_trainer_t), intent(in) :: t
    integer(c_int), intent(inout), optional, contiguous :: lines(:)
    integer :: p
    integer(c_int) :: none(1)
    if (present(lines)) then
       if (size(lines) > 0) then
          p = c_trainer_stages(t%p, lines, int(size(lines) - 1, c_int))
          return
       end if
    end if
    p = c_trainer_stages(t%p, none, 0_c_int)
  end function clt_trainer_stages

  ! Load the newest whole checkpoint of dir (fit's opts%checkpoint_dir);
  ! loaded (optional) gets its path. None there is CLT_ENOTFOUND: start
  ! afresh. Collective.
  function clt_trainer_resume_latest(t, dir, loaded) result(rc)
    type(clt_trainer_t), intent(in) :: t
    character(len=*), intent(in) :: dir
    character(len=:), allocatable, intent(out), optional :: loaded
    integer(c_int) :: rc
    character(kind=c_char) :: buf(4096)
    integer :: i
    call begin()
    buf = c_null_char
    rc = c_trainer_resume_latest(t%p, c_str(dir), buf, size(buf, kind=c_size_t))
    if (present(loaded)) then
       loaded = ''
       do i = 1, size(buf)
          if (buf(i) == c_null_char) exit
          loaded = loaded // buf(i)
       end do
    end if
  end function clt_trainer_resume_latest

  ! A timeline for Perfetto or Chrome's trace viewer: start recording on
  ! every rank, then save what was recorded since to path (Trace Event
  ! Format JSON, rank 0 writes) and stop. Both collective.
  function clt_trainer_trace_start(t) result(rc)
    type(clt_trainer_t), intent(in) :: t
    integer(c_int) :: rc
    call begin()
    rc = c_trainer_trace_start(t%p)
  end function clt_trainer_trace_start

  function clt_trainer_trace_save(t, path) result(rc)
    type(clt_trainer_t), intent(in) :: t
    character(len=*), intent(in) :: path
    integer(c_int) :: rc
    call begin()
    rc = c_trainer_trace_save(t%p, c_str(path))
  end function clt_trainer_trace_save

  ! A checkpoint's parameters alone as a weights file; needs no device.
  function clt_checkpoint_export(checkpoint, out) result(rc)
    character(len=*), intent(in) :: checkpoint, out
    integer(c_int) :: rc
    call begin()
    rc = c_checkpoint_export(c_str(checkpoint), c_str(out))
  end function clt_checkpoint_export

  ! Whether path can be written as kind (CLT_OUTPUT_FILE, _APPEND, _DIR)
  ! says: CLT_OK, or CLT_EIO naming the path and why. Check before long work.
  function clt_check_output(path, kind) result(rc)
    character(len=*), intent(in) :: path
    integer(c_int), intent(in) :: kind
    integer(c_int) :: rc
    call begin()
    rc = c_check_output(c_str(path), kind)
  end function clt_check_output

  ! Library messages above level (CLT_LOG_*) are dropped.
  subroutine clt_log_set_level(level)
    integer(c_int), intent(in) :: level
    call c_log_set_level(level)
  end subroutine clt_log_set_level

  function clt_log_get_level() result(level)
    integer(c_int) :: level
    level = c_log_get_level()
  end function clt_log_get_level

  ! ---- users' own data --------------------------------------------------------

  ! A dataset by what path holds: CSV, NumPy .npy/.npz, an HDF5 dataset
  ! ("file.h5:/group/ds") or a cltrain raw file. The optional arguments are
  ! clt_data_options': labels (a separate file of labels or targets),
  ! target and features (CSV columns, or .npz members), regression
  ! (.true.: float targets), num_classes (0: the largest label + 1).
  function clt_dataset_open(path, ds, labels, target, features, regression, num_classes) result(rc)
    character(len=*), intent(in) :: path
    type(clt_dataset_t), intent(out) :: ds
    character(len=*), intent(in), optional :: labels, target, features
    logical, intent(in), optional :: regression
    integer, intent(in), optional :: num_classes
    integer(c_int) :: rc, reg, nc
    character(kind=c_char, len=:), allocatable, target :: l, tg, f
    type(c_ptr) :: lp, tp, fp
    call begin()
    lp = c_null_ptr
    tp = c_null_ptr
    fp = c_null_ptr
    if (present(labels)) then
       l = c_str(labels)
       lp = c_loc(l)
    end if
    if (present(target)) then
       tg = c_str(target)
       tp = c_loc(tg)
    end if
    if (present(features)) then
       f = c_str(features)
       fp = c_loc(f)
    end if
    reg = 0
    if (present(regression)) then
       if (regression) reg = 1
    end if
    nc = 0
    if (present(num_classes)) nc = int(num_classes, c_int)
    rc = c_dataset_open(c_str(path), lp, tp, fp, reg, nc, ds%p)
  end function clt_dataset_open

  ! A cltrain raw file (doc/data.md), plain or .gz.
  function clt_dataset_open_raw(path, ds) result(rc)
    character(len=*), intent(in) :: path
    type(clt_dataset_t), intent(out) :: ds
    integer(c_int) :: rc
    call begin()
    rc = c_dataset_open_raw(c_str(path), ds%p)
  end function clt_dataset_open_raw

  ! Write the samples x(sample_size, count) and labels y(count) in [0,
  ! num_classes) as a raw file (gzip when path ends in .gz). shape
  ! (optional) is a sample's dimensions in C order, slowest first (28, 28),
  ! their product size(x, 1); by default one dimension.
  function clt_dataset_write_raw(path, x, y, num_classes, shape) result(rc)
    character(len=*), intent(in) :: path
    real(c_float), intent(in), contiguous :: x(:, :)
    integer(c_int32_t), intent(in), contiguous :: y(:)
    integer, intent(in) :: num_classes
    integer(c_int64_t), intent(in), optional :: shape(:)
    integer(c_int) :: rc
    integer(c_int64_t) :: dims(8)
    integer(c_int) :: nd
    call begin()
    if (size(y) /= size(x, 2)) then
       rc = fail(CLT_EINVAL, 'clt_dataset_write_raw: y has ' // itoa(size(y, kind=c_int64_t)) // ' labels for the ' &
            // itoa(size(x, 2, kind=c_int64_t)) // ' samples of x(sample_size, count)')
       return
    end if
    nd = 1
    dims(1) = size(x, 1, kind=c_int64_t)
    if (present(shape)) then
       if (size(shape) < 1 .or. size(shape) > 8) then
          rc = fail(CLT_EINVAL, 'clt_dataset_write_raw: shape has ' // itoa(size(shape, kind=c_int64_t)) // &
               ' dimensions: give 1 to 8')
          return
       end if
       if (product(shape) /= size(x, 1, kind=c_int64_t)) then
          rc = fail(CLT_EINVAL, 'clt_dataset_write_raw: the product of shape is ' // itoa(product(shape)) // &
               ' but x has ' // itoa(size(x, 1, kind=c_int64_t)) // ' values per sample')
          return
       end if
       nd = int(size(shape), c_int)
       dims(1:nd) = shape
    end if
    rc = c_dataset_write_raw(c_str(path), size(x, 2, kind=c_int64_t), nd, dims, int(num_classes, c_int), x, y)
  end function clt_dataset_write_raw

  ! The last `fraction` (0 < fraction < 1) of ds's samples moved into a new
  ! dataset val (a validation split). Datasets of clt_dataset_open only.
  function clt_dataset_split(ds, fraction, val) result(rc)
    type(clt_dataset_t), intent(in) :: ds
    real(c_double), intent(in) :: fraction
    type(clt_dataset_t), intent(out) :: val
    integer(c_int) :: rc
    call begin()
    rc = c_dataset_split(ds%p, fraction, val%p)
  end function clt_dataset_split

  function clt_dataset_num_classes(ds) result(n)
    type(clt_dataset_t), intent(in) :: ds
    integer :: n
    n = c_dataset_num_classes(ds%p)
  end function clt_dataset_num_classes

  ! Float targets per sample of a regression dataset (0 for labels).
  function clt_dataset_targets_per_sample(ds) result(n)
    type(clt_dataset_t), intent(in) :: ds
    integer(c_int64_t) :: n
    n = c_dataset_targets_per_sample(ds%p)
  end function clt_dataset_targets_per_sample

  function clt_dataset_labels_per_sample(ds) result(n)
    type(clt_dataset_t), intent(in) :: ds
    integer(c_int64_t) :: n
    n = c_dataset_labels_per_sample(ds%p)
  end function clt_dataset_labels_per_sample

  ! Samples indices(:) (0-based) into x(sample_size, n) and their float
  ! targets into targets(targets_per_sample, n).
  function clt_dataset_get_batch_targets(ds, indices, x, targets) result(rc)
    type(clt_dataset_t), intent(in) :: ds
    integer(c_int64_t), intent(in), contiguous :: indices(:)
    real(c_float), intent(inout), contiguous :: x(:, :), targets(:, :)
    integer(c_int) :: rc
    integer(c_int64_t) :: n
    call begin()
    n = size(indices, kind=c_int64_t)
    if (size(x, 1, kind=c_int64_t) /= c_dataset_sample_size(ds%p) .or. size(x, 2, kind=c_int64_t) /= n .or. &
         size(targets, 1, kind=c_int64_t) /= c_dataset_targets_per_sample(ds%p) .or. &
         size(targets, 2, kind=c_int64_t) /= n) then
       rc = fail(CLT_EINVAL, 'clt_dataset_get_batch_targets: x is (' // itoa(size(x, 1, kind=c_int64_t)) // ', ' // &
            itoa(size(x, 2, kind=c_int64_t)) // ') and targets (' // itoa(size(targets, 1, kind=c_int64_t)) // ', ' &
            // itoa(size(targets, 2, kind=c_int64_t)) // ') but the ' // itoa(n) // ' indices need (' // &
            itoa(c_dataset_sample_size(ds%p)) // ', ' // itoa(n) // ') and (' // &
            itoa(c_dataset_targets_per_sample(ds%p)) // ', ' // itoa(n) // ')')
       return
    end if
    rc = c_dataset_get_batch_targets(ds%p, indices, n, x, targets)
  end function clt_dataset_get_batch_targets

  ! ---- more of models, communicators, normalisation and datasets -------------

  ! Layers, the input line included.
  function clt_model_layer_count(m) result(n)
    type(clt_model_t), intent(in) :: m
    integer :: n
    n = c_model_layer_count(m%p)
  end function clt_model_layer_count

  ! A language model's vocabulary; 0 for a model of features or images.
  function clt_model_vocab(m) result(n)
    type(clt_model_t), intent(in) :: m
    integer :: n
    n = c_model_vocab(m%p)
  end function clt_model_vocab

  ! CLT_LOSS_CROSSENTROPY, _MSE, _L1 or _HUBER (the spec's loss line); -1
  ! for a model never made.
  function clt_model_loss(m) result(k)
    type(clt_model_t), intent(in) :: m
    integer :: k
    k = c_model_loss(m%p)
  end function clt_model_loss

  ! The spec as written.
  function clt_model_text(m) result(s)
    type(clt_model_t), intent(in) :: m
    character(len=:), allocatable :: s
    s = f_str(c_model_text(m%p))
  end function clt_model_text

  ! A table of layers, output shapes and parameter counts.
  function clt_model_summary(m, text) result(rc)
    type(clt_model_t), intent(in) :: m
    character(len=:), allocatable, intent(out) :: text
    integer(c_int) :: rc
    type(c_ptr) :: p
    call begin()
    p = c_null_ptr
    rc = c_model_summary(m%p, p)
    text = f_str(p)
    call c_free(p)
  end function clt_model_summary

  ! Seconds without progress before a collective's wait fails
  ! (CLT_ETIMEDOUT); CLT_TIMEOUT's by default.
  function clt_comm_set_timeout(comm, seconds) result(rc)
    type(clt_comm_t), intent(in) :: comm
    real(c_double), intent(in) :: seconds
    integer(c_int) :: rc
    call begin()
    rc = c_comm_set_timeout(comm%p, seconds)
  end function clt_comm_set_timeout

  function clt_comm_timeout(comm) result(s)
    type(clt_comm_t), intent(in) :: comm
    real(c_double) :: s
    s = c_comm_timeout(comm%p)
  end function clt_comm_timeout

  ! The file fit writes at `step` in dir ("dir/ckpt-0000000100.safetensors").
  function clt_checkpoint_path(dir, step, path) result(rc)
    character(len=*), intent(in) :: dir
    integer(c_int64_t), intent(in) :: step
    character(len=:), allocatable, intent(out) :: path
    integer(c_int) :: rc
    character(kind=c_char) :: buf(4096)
    integer :: i
    call begin()
    buf = c_null_char
    rc = c_checkpoint_path(c_str(dir), step, buf, size(buf, kind=c_size_t))
    path = ''
    do i = 1, size(buf)
       if (buf(i) == c_null_char) exit
       path = path // buf(i)
    end do
  end function clt_checkpoint_path

  ! The per-feature normalisation of the model's inputs (kind
  ! CLT_NORMALIZE_*, shift and scale of input_size values each; kind
  ! CLT_NORMALIZE_NONE without them clears it): the step API's x are then
  ! raw features, and the weights files and checkpoints carry it.
  function clt_trainer_set_normalization(t, kind, shift, scale) result(rc)
    type(clt_trainer_t), intent(in) :: t
    integer(c_int), intent(in) :: kind
    real(c_float), intent(in), optional, contiguous, target :: shift(:), scale(:)
    integer(c_int) :: rc
    type(c_ptr) :: sh, sc
    call begin()
    rc = norm_args('clt_trainer_set_normalization', t%input_size, shift, scale, sh, sc)
    if (rc == CLT_OK) rc = c_trainer_set_normalization(t%p, kind, sh, sc)
  end function clt_trainer_set_normalization

  ! The same for a dataset (sample_size values each), applied as batches
  ! are taken.
  function clt_dataset_normalize_features(ds, kind, shift, scale) result(rc)
    type(clt_dataset_t), intent(in) :: ds
    integer(c_int), intent(in) :: kind
    real(c_float), intent(in), optional, contiguous, target :: shift(:), scale(:)
    integer(c_int) :: rc
    type(c_ptr) :: sh, sc
    call begin()
    rc = norm_args('clt_dataset_normalize_features', c_dataset_sample_size(ds%p), shift, scale, sh, sc)
    if (rc == CLT_OK) rc = c_dataset_normalize_features(ds%p, kind, sh, sc)
  end function clt_dataset_normalize_features

  ! shift and scale both given, n values each, or neither.
  function norm_args(fn, n, shift, scale, sh, sc) result(rc)
    character(len=*), intent(in) :: fn
    integer(c_int64_t), intent(in) :: n
    real(c_float), intent(in), optional, contiguous, target :: shift(:), scale(:)
    type(c_ptr), intent(out) :: sh, sc
    integer(c_int) :: rc
    rc = CLT_OK
    sh = c_null_ptr
    sc = c_null_ptr
    if (present(shift) .neqv. present(scale)) then
       rc = fail(CLT_EINVAL, fn // ': give shift and scale together, or neither')
       return
    end if
    if (.not. present(shift)) return
    if (size(shift, kind=c_int64_t) /= n .or. size(scale, kind=c_int64_t) /= n) then
       rc = fail(CLT_EINVAL, fn // ': shift has ' // itoa(size(shift, kind=c_int64_t)) // ' values and scale ' // &
            itoa(size(scale, kind=c_int64_t)) // ', and a sample ' // itoa(n) // ': one per value of a sample')
       return
    end if
    if (n > 0) then
       sh = c_loc(shift)
       sc = c_loc(scale)
    end if
  end function norm_args

  ! The dataset's per-feature normalisation: its kind, and with shift and
  ! scale (sample_size values each), the values.
  function clt_dataset_feature_normalization(ds, shift, scale) result(kind)
    type(clt_dataset_t), intent(in) :: ds
    real(c_float), intent(inout), optional, contiguous, target :: shift(:), scale(:)
    integer(c_int) :: kind
    type(c_ptr) :: sh, sc
    sh = c_null_ptr
    sc = c_null_ptr
    if (present(shift) .and. present(scale)) then
       if (size(shift, kind=c_int64_t) >= c_dataset_sample_size(ds%p) .and. &
            size(scale, kind=c_int64_t) >= c_dataset_sample_size(ds%p)) then
          sh = c_loc(shift)
          sc = c_loc(scale)
       end if
    end if
    kind = c_dataset_feature_normalization(ds%p, sh, sc)
  end function clt_dataset_feature_normalization

  ! The labels that count over the whole dataset (what a mean loss over it
  ! divides by).
  function clt_dataset_label_count(ds) result(n)
    type(clt_dataset_t), intent(in) :: ds
    integer(c_int64_t) :: n
    n = c_dataset_label_count(ds%p)
  end function clt_dataset_label_count

  ! A sample's dimensions in C order, slowest first ((28, 28) for MNIST),
  ! into dims (up to 8); returns how many there are.
  function clt_dataset_sample_shape(ds, dims) result(n)
    type(clt_dataset_t), intent(in) :: ds
    integer(c_int64_t), intent(out) :: dims(8)
    integer :: n
    dims = 0
    n = c_dataset_sample_shape(ds%p, dims)
  end function clt_dataset_sample_shape

  ! Explicit IDX image and label files (plain or gzip); num_classes 0: the
  ! largest label + 1.
  function clt_dataset_open_idx_files(images, labels, num_classes, ds) result(rc)
    character(len=*), intent(in) :: images, labels
    integer, intent(in) :: num_classes
    type(clt_dataset_t), intent(out) :: ds
    integer(c_int) :: rc
    call begin()
    rc = c_dataset_open_idx_files(c_str(images), c_str(labels), int(num_classes, c_int), ds%p)
  end function clt_dataset_open_idx_files

end module cltrain
