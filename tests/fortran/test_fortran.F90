! test_fortran.F90: the Fortran module (use cltrain) end to end, on 1 or
! more MPI ranks (tests/fortran/fortran.sh): devices, a communicator from
! MPI_COMM_WORLD's Fortran handle (or this process alone, built without
! MPI's Fortran module), a model from a spec string, a trainer, steps whose
! loss falls, predict's shape, weights and checkpoints round trips bit for
! bit, and bad input: an invalid communicator handle, a bad spec, arrays of
! the wrong shape, handles never made, an empty path, each a non-zero
! status and a message naming it (or, for a function that returns a value,
! the value a handle never made gives: 0). The options: every component of
! clt_options_t set to a value other than its default and read back from
! the library's clt_train_options by the C member (tests/fortran/
! options_check.c, which also fails when the struct has a field the
! Fortran options lack), its callback called through C, and options the
! library cannot take (a negative batch, a path too long, a negative
! memory limit) refused naming them. fit and evaluate on a dataset the test
! writes, with a metrics file, checkpoints, the callback and a trace; a
! regression prediction and gradient with float targets.
! Exits 77 (skipped) without an OpenCL device.
program test_fortran
  use, intrinsic :: iso_c_binding
  use, intrinsic :: ieee_arithmetic, only: ieee_is_finite
  use cltrain
#ifdef CLT_TEST_MPI
  use mpi
#endif
  implicit none

  interface
     function audit(o) bind(C, name="clt_test_options_audit") result(bad)
       import :: c_ptr, c_int
       type(c_ptr), value :: o
       integer(c_int) :: bad
     end function audit
     function differ(a, b) bind(C, name="clt_test_options_differ") result(row)
       import :: c_ptr, c_int
       type(c_ptr), value :: a, b
       integer(c_int) :: row
     end function differ
     function c_int_of(o, name, v) bind(C, name="clt_test_option_int") result(rc)
       import :: c_ptr, c_int, c_char, c_int64_t
       type(c_ptr), value :: o
       character(kind=c_char), intent(in) :: name(*)
       integer(c_int64_t), intent(out) :: v
       integer(c_int) :: rc
     end function c_int_of
     function c_real_of(o, name, v) bind(C, name="clt_test_option_real") result(rc)
       import :: c_ptr, c_int, c_char, c_double
       type(c_ptr), value :: o
       character(kind=c_char), intent(in) :: name(*)
       real(c_double), intent(out) :: v
       integer(c_int) :: rc
     end function c_real_of
     function c_string_of(o, name, buf, cap) bind(C, name="clt_test_option_string") result(n)
       import :: c_ptr, c_int, c_char
       type(c_ptr), value :: o
       character(kind=c_char), intent(in) :: name(*)
       character(kind=c_char), intent(inout) :: buf(*)
       integer(c_int), value :: cap
       integer(c_int) :: n
     end function c_string_of
     function c_reals_of(o, name, buf, cap) bind(C, name="clt_test_option_reals") result(n)
       import :: c_ptr, c_int, c_char, c_double
       type(c_ptr), value :: o
       character(kind=c_char), intent(in) :: name(*)
       real(c_double), intent(inout) :: buf(*)
       integer(c_int), value :: cap
       integer(c_int) :: n
     end function c_reals_of
     function c_call_callback(o) bind(C, name="clt_test_option_callback") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: o
       integer(c_int) :: rc
     end function c_call_callback
  end interface

  ! what the callback saw: events by kind, the last step's number and shares
  integer, target :: seen(0:2) = 0
  integer(c_int64_t) :: seen_step = -1, seen_shares(2) = -1
  real(c_double) :: seen_loss = -1

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
  real(c_float), allocatable :: p1(:), p2(:), p3(:), q1(:), q2(:), greg(:)
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
  call test_options()

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
  call check(clt_model_layer_count(model) == 4 .and. clt_model_vocab(model) == 0 .and. &
       clt_model_loss(model) == CLT_LOSS_CROSSENTROPY .and. clt_model_loss(nomodel) == -1 .and. &
       index(clt_model_text(model), 'linear 16') > 0, 'the model''s layers, vocabulary, loss and text')
  rc = clt_model_summary(model, msg)
  call check(rc == CLT_OK .and. index(msg, 'linear') > 0 .and. index(msg, 'total parameters: 131') > 0, &
       'the model''s summary: ' // msg)
  call check(clt_comm_set_timeout(comm, 45d0) == CLT_OK .and. abs(clt_comm_timeout(comm) - 45) < 1e-9, &
       'the communicator''s timeout')
  rc = clt_checkpoint_path('ckdir', 100_c_int64_t, msg)
  call check(rc == CLT_OK .and. msg == 'ckdir/ckpt-0000000100.safetensors', 'fit''s checkpoint path: ' // msg)

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

  ! ---- bad options, refused by clt_trainer_create naming the field: a
  ! negative batch (the library's check), a path longer than any path
  ! (the module's), a negative memory limit (the shim's)
  opts%batch = -5
  rc = clt_trainer_create(model, mine, comm, opts, never)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'batch') > 0 .and. index(msg, '-5') > 0 .and. &
       .not. c_associated(never%p), 'a negative batch is refused naming it: ' // msg)
  call clt_options_default(opts)
  opts%metrics_path = repeat('m', 5000)
  rc = clt_trainer_create(model, mine, comm, opts, never)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'opts%metrics_path is 5000 characters') > 0 .and. &
       .not. c_associated(never%p), 'a metrics path too long is refused naming it: ' // msg)
  call clt_options_default(opts)
  opts%max_device_memory = -1
  rc = clt_trainer_create(model, mine, comm, opts, never)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'opts%max_device_memory is -1') > 0, &
       'a negative memory limit is refused naming it: ' // msg)
  call clt_options_default(opts)
  opts%zero = 7
  rc = clt_trainer_create(model, mine, comm, opts, never)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'zero 7') > 0, 'ZeRO stage 7 is refused naming it: ' // msg)
  call clt_options_default(opts)
  opts%batch = nlocal * nranks
  opts%lr = 0.1

  ! ---- fit and evaluate on a dataset written here, with every output
  call test_fit()

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
  call check(clt_model_loss(regmodel) == CLT_LOSS_MSE, 'a regression model''s loss')
  call check(last_loss < 0.5 * first_loss .and. ieee_is_finite(res%rmse) .and. res%rmse > 0, &
       'the regression loss falls by half in 30 steps, with its RMSE')
  call check(abs(res%rmse - sqrt(res%loss)) < 1e-6 * max(1.0_c_double, res%rmse), 'MSE''s RMSE is its root')
  rc = clt_trainer_predict(reg, x, pout)
  call check(rc == CLT_OK, 'regression predict: ' // clt_error_message())
  rc = clt_trainer_predict_targets(reg, x, pout, tg, loss, loss_a)
  call check(rc == CLT_OK .and. abs(sqrt(loss_a / size(tg)) - res%rmse) < 0.5 * res%rmse, &
       'predict with float targets: its squared error gives about the last step''s RMSE: ' // clt_error_message())
  allocate (greg(clt_model_param_count(regmodel)))
  greg = 0
  rc = clt_trainer_gradient_targets(reg, x, tg, greg, loss_b)
  call check(rc == CLT_OK .and. any(greg /= 0) .and. all(ieee_is_finite(greg)) .and. ieee_is_finite(loss_b), &
       'the gradient of a regression loss with float targets: ' // clt_error_message())
  rc = clt_trainer_predict_targets(reg, x, pout, tg_bad)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'targets is 3 x') > 0, 'predict''s targets of the wrong shape: ' // msg)
  rc = clt_trainer_step_targets(reg, x, tg_bad, res)
  msg = clt_error_message()
  call check(rc == CLT_EINVAL .and. index(msg, 'targets is 3 x') > 0, 'targets of the wrong shape: ' // msg)
  rc = clt_trainer_step(reg, x, y, res)
  call check(rc == CLT_EINVAL, 'labels to a regression model are refused: ' // clt_error_message())
  call test_regression_fit()
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

  ! Every option to a value other than its default, read back from the C
  ! struct by each C member; the struct's every field reached (audit); the
  ! initial values the library's defaults; the callback through C.
  subroutine test_options()
    type(clt_options_t) :: o, init, d
    type(clt_c_options_t) :: c, cd, ci
    integer(c_int) :: r
    real(c_double) :: w(8)
    character(kind=c_char) :: cb(4)
    call clt_options_default(d)
    call require(clt_options_to_c(d, cd) == CLT_OK, 'options to C')
    call require(clt_options_to_c(init, ci) == CLT_OK, 'options to C')
    call check(differ(cd%p, ci%p) == 0, 'clt_options_t''s initial values are the library''s defaults')
    call clt_c_options_destroy(ci)

    o%batch = 96
    o%epochs = 3
    o%max_steps = 1234
    o%accumulate = 4
    o%optimizer = CLT_OPT_ADAMW
    o%momentum = 0.5
    o%nesterov = 1
    o%weight_decay = 0.125
    o%beta1 = 0.8
    o%beta2 = 0.95
    o%eps = 1e-6
    o%schedule = CLT_SCHED_COSINE
    o%lr = 0.25
    o%warmup_steps = 11
    o%total_steps = 222
    o%step_size = 33
    o%gamma = 0.5
    o%min_lr = 0.0625
    o%clip = 1.5
    o%decay_all = 1
    o%seed = 4242
    o%eval_every = 5
    o%log_every = 7
    o%metrics_path = 'metrics.jsonl   '
    o%tensorboard_dir = 'tb'
    o%drop_last = 1
    o%callback => on_event
    o%callback_user = c_loc(seen)
    o%bucket_mb = 2.5
    o%balance = CLT_BALANCE_WEIGHTS
    o%balance_weights = [2d0, 1d0, 0.5d0]
    o%balance_every = 13
    o%balance_min_share = 2
    o%check_every = 17
    o%checkpoint_dir = 'ckpts'
    o%checkpoint_every = 19
    o%checkpoint_keep = 5
    o%precision = CLT_F16
    o%loss_scale = 1024
    o%loss_scale_window = 23
    o%max_skips = 29
    o%max_device_memory = 3_c_int64_t * 1024_c_int64_t**3
    o%zero = 2
    o%pipeline = 2
    o%micro_batches = 8
    o%pipeline_schedule = CLT_PIPELINE_GPIPE
    o%stages = '2,3'
    o%checkpoint_one_file = 1
    o%progress_s = 0.75
    o%run_json = '{"from": "fortran"}'
    o%offload = CLT_OFFLOAD_OPTIMIZER
    o%shard_by = CLT_SHARD_WEIGHTS
    o%shard_weights = [3d0, 1d0]
    o%recompute = CLT_RECOMPUTE_BLOCKS
    call require(clt_options_to_c(o, c) == CLT_OK, 'every option to C')
    call check(audit(c%p) == 0, 'every field of clt_train_options is a Fortran option, and each was set')
    call check(differ(cd%p, c%p) == 1, 'the options differ from the defaults from the first field on')
    call clt_c_options_destroy(cd)

    call int_is(c, 'batch', 96_c_int64_t)
    call int_is(c, 'epochs', 3_c_int64_t)
    call int_is(c, 'max_steps', 1234_c_int64_t)
    call int_is(c, 'accumulate', 4_c_int64_t)
    call int_is(c, 'optimizer', int(CLT_OPT_ADAMW, c_int64_t))
    call real_is(c, 'momentum', 0.5d0)
    call int_is(c, 'nesterov', 1_c_int64_t)
    call real_is(c, 'weight_decay', 0.125d0)
    call real_is(c, 'beta1', real(0.8_c_float, c_double))
    call real_is(c, 'beta2', real(0.95_c_float, c_double))
    call real_is(c, 'eps', real(1e-6_c_float, c_double))
    call int_is(c, 'schedule', int(CLT_SCHED_COSINE, c_int64_t))
    call real_is(c, 'lr', 0.25d0)
    call int_is(c, 'warmup_steps', 11_c_int64_t)
    call int_is(c, 'total_steps', 222_c_int64_t)
    call int_is(c, 'step_size', 33_c_int64_t)
    call real_is(c, 'gamma', 0.5d0)
    call real_is(c, 'min_lr', 0.0625d0)
    call real_is(c, 'clip', 1.5d0)
    call int_is(c, 'decay_all', 1_c_int64_t)
    call int_is(c, 'seed', 4242_c_int64_t)
    call int_is(c, 'eval_every', 5_c_int64_t)
    call int_is(c, 'log_every', 7_c_int64_t)
    call string_is(c, 'metrics_path', 'metrics.jsonl')
    call string_is(c, 'tensorboard_dir', 'tb')
    call int_is(c, 'drop_last', 1_c_int64_t)
    call real_is(c, 'bucket_mb', 2.5d0)
    call int_is(c, 'balance', int(CLT_BALANCE_WEIGHTS, c_int64_t))
    w = -1
    r = c_reals_of(c%p, c_str0('balance_weights'), w, 8_c_int)
    call check(r == 3 .and. all(w(1:3) == [2d0, 1d0, 0.5d0]), 'opts%balance_weights reads back, with its count')
    call int_is(c, 'balance_every', 13_c_int64_t)
    call int_is(c, 'balance_min_share', 2_c_int64_t)
    call int_is(c, 'check_every', 17_c_int64_t)
    call string_is(c, 'checkpoint_dir', 'ckpts')
    call int_is(c, 'checkpoint_every', 19_c_int64_t)
    call int_is(c, 'checkpoint_keep', 5_c_int64_t)
    call int_is(c, 'precision', int(CLT_F16, c_int64_t))
    call real_is(c, 'loss_scale', 1024d0)
    call int_is(c, 'loss_scale_window', 23_c_int64_t)
    call int_is(c, 'max_skips', 29_c_int64_t)
    call int_is(c, 'max_device_memory', 3_c_int64_t * 1024_c_int64_t**3)
    call int_is(c, 'zero', 2_c_int64_t)
    call int_is(c, 'pipeline', 2_c_int64_t)
    call int_is(c, 'micro_batches', 8_c_int64_t)
    call int_is(c, 'pipeline_schedule', int(CLT_PIPELINE_GPIPE, c_int64_t))
    call string_is(c, 'stages', '2,3')
    call int_is(c, 'checkpoint_one_file', 1_c_int64_t)
    call real_is(c, 'progress_s', 0.75d0)
    call string_is(c, 'run_json', '{"from": "fortran"}')
    call int_is(c, 'offload', int(CLT_OFFLOAD_OPTIMIZER, c_int64_t))
    call int_is(c, 'shard_by', int(CLT_SHARD_WEIGHTS, c_int64_t))
    w = -1
    r = c_reals_of(c%p, c_str0('shard_weights'), w, 8_c_int)
    call check(r == 2 .and. all(w(1:2) == [3d0, 1d0]), 'opts%shard_weights reads back, with its count')
    call int_is(c, 'recompute', int(CLT_RECOMPUTE_BLOCKS, c_int64_t))

    ! the callback, called through the C struct as fit calls it
    seen = 0
    r = c_call_callback(c%p)
    call check(r == 0 .and. seen(CLT_EVENT_STEP) == 1 .and. seen_step == 7 .and. all(seen_shares == [3, 4]) .and. &
         seen_loss == 0.5d0, 'the Fortran callback gets the event, its per-replica arrays and its user pointer')
    call clt_c_options_destroy(c)
    call clt_c_options_destroy(c) ! a second time: a no-op

    ! left unallocated: the library's NULL; an empty string is a string
    deallocate (o%metrics_path, o%balance_weights)
    o%tensorboard_dir = ''
    call require(clt_options_to_c(o, c) == CLT_OK, 'options to C')
    r = c_string_of(c%p, c_str0('metrics_path'), cb, 4_c_int)
    call check(r == -1, 'an unallocated path is NULL')
    r = c_reals_of(c%p, c_str0('balance_weights'), w, 8_c_int)
    call check(r == -1, 'unallocated weights are NULL')
    call string_is(c, 'tensorboard_dir', '')
    call clt_c_options_destroy(c)

    ! what no C field can hold, refused naming the component
    o%stages = repeat('1,', 40000)
    r = clt_options_to_c(o, c)
    call check(r == CLT_EINVAL .and. index(clt_error_message(), 'opts%stages is 80000 characters') > 0 .and. &
         .not. c_associated(c%p), 'stages too long: ' // clt_error_message())
  end subroutine test_options

  subroutine int_is(c, name, v)
    type(clt_c_options_t), intent(in) :: c
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(in) :: v
    integer(c_int64_t) :: got
    got = -999
    call check(c_int_of(c%p, c_str0(name), got) == 0 .and. got == v, 'opts%' // name // ' reads back from C')
  end subroutine int_is
  subroutine real_is(c, name, v)
    type(clt_c_options_t), intent(in) :: c
    character(len=*), intent(in) :: name
    real(c_double), intent(in) :: v
    real(c_double) :: got
    got = -999
    call check(c_real_of(c%p, c_str0(name), got) == 0 .and. got == v, 'opts%' // name // ' reads back from C')
  end subroutine real_is
  subroutine string_is(c, name, v)
    type(clt_c_options_t), intent(in) :: c
    character(len=*), intent(in) :: name, v
    character(kind=c_char) :: buf(256)
    integer :: n, k
    logical :: same
    buf = ' '
    n = c_string_of(c%p, c_str0(name), buf, 256_c_int)
    same = n == len(v)
    do k = 1, min(n, len(v))
       same = same .and. buf(k) == v(k:k)
    end do
    call check(same, 'opts%' // name // ' reads back from C (trailing blanks trimmed)')
  end subroutine string_is

  function c_str0(s) result(cs)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: cs
    cs = s // c_null_char
  end function c_str0

  ! The test's callback: counts events by kind in the array its user
  ! pointer gives, and keeps the last step event's numbers.
  subroutine on_event(ev, user)
    type(clt_event_t), intent(in) :: ev
    type(c_ptr), intent(in) :: user
    integer, pointer :: counts(:)
    call c_f_pointer(user, counts, [3])
    counts(ev%kind + 1) = counts(ev%kind + 1) + 1
    if (ev%kind == CLT_EVENT_STEP) then
       seen_step = ev%step
       seen_loss = ev%loss
       if (allocated(ev%shares)) then
          if (size(ev%shares) >= 2) seen_shares = ev%shares(1:2)
       end if
    end if
  end subroutine on_event

  ! fit on 384 samples of the three clusters (written by each rank to its
  ! own file, the same bytes), evaluated on 96 more, with a metrics file,
  ! checkpoints, the callback and a trace; then evaluate, resume_latest.
  subroutine test_fit()
    integer, parameter :: ntrain = 384, ntest = 96
    real(c_float) :: xt(nfeat, ntrain), xv(nfeat, ntest)
    integer(c_int32_t) :: yt(ntrain), yv(ntest)
    type(clt_dataset_t) :: train, test
    type(clt_trainer_t) :: ft
    type(clt_options_t) :: o
    character(len=64) :: trainf, testf
    character(len=:), allocatable :: loaded
    real(c_double) :: l, a
    integer :: u, ios, lines
    logical :: there
    integer(c_int64_t) :: dims(8)
    integer :: nd
    real(c_float) :: shift(nfeat), scale(nfeat)
    call cluster_data(xt, yt, 0)
    call cluster_data(xv, yv, 1)
    write (trainf, '(a, i0, a)') 'test_fortran_train_r', rank, '.raw'
    write (testf, '(a, i0, a)') 'test_fortran_test_r', rank, '.raw'
    call require(clt_dataset_write_raw(trim(trainf), xt, yt, nclass) == CLT_OK, 'write the training set')
    call require(clt_dataset_write_raw(trim(testf), xv, yv, nclass, [2_c_int64_t, 2_c_int64_t]) == CLT_OK, &
         'write the test set')
    rc = clt_dataset_write_raw(trim(testf), xv, yv, nclass, [3_c_int64_t, 2_c_int64_t])
    call check(rc == CLT_EINVAL .and. index(clt_error_message(), 'product of shape is 6') > 0, &
         'a shape that is not the samples'' is refused: ' // clt_error_message())
    call require(clt_dataset_open_raw(trim(trainf), train) == CLT_OK, 'open the training set')
    call require(clt_dataset_open(trim(testf), test) == CLT_OK, 'open the test set by what it holds')
    call check(clt_dataset_count(train) == ntrain .and. clt_dataset_num_classes(test) == nclass .and. &
         clt_dataset_sample_size(test) == nfeat .and. clt_dataset_targets_per_sample(test) == 0, &
         'the datasets'' sizes')
    nd = clt_dataset_sample_shape(test, dims)
    call check(nd == 2 .and. all(dims(1:2) == 2) .and. clt_dataset_label_count(train) == ntrain, &
         'a sample''s shape as written, and the labels that count')
    shift = 0
    scale = 1
    call check(clt_dataset_feature_normalization(test) == CLT_NORMALIZE_NONE, 'no normalisation to begin with')
    rc = clt_dataset_normalize_features(test, CLT_NORMALIZE_STANDARD, shift, scale)
    call check(rc == CLT_OK .and. clt_dataset_feature_normalization(test, shift, scale) == CLT_NORMALIZE_STANDARD &
         .and. all(scale == 1), 'a dataset''s per-feature normalisation, set and read back')
    rc = clt_dataset_normalize_features(test, CLT_NORMALIZE_STANDARD, shift(1:3), scale)
    call check(rc == CLT_EINVAL .and. index(clt_error_message(), 'shift has 3 values') > 0, &
         'a shift of the wrong size: ' // clt_error_message())
    call require(clt_dataset_normalize_features(test, CLT_NORMALIZE_NONE) == CLT_OK, 'normalisation removed')
    if (rank == 0) call execute_command_line('rm -rf test_fortran_ckpts test_fortran_metrics.jsonl')

    call clt_options_default(o)
    o%batch = 32
    o%epochs = 3
    o%lr = 0.1
    o%log_every = 4
    o%metrics_path = 'test_fortran_metrics.jsonl'
    o%checkpoint_dir = 'test_fortran_ckpts'
    o%checkpoint_every = 12
    o%callback => on_event
    o%callback_user = c_loc(seen)
    seen = 0
    call require(clt_trainer_create(model, mine, comm, o, ft) == CLT_OK, 'fit''s trainer')
    ! the trainer keeps its own copy: what the caller does to o afterwards changes nothing
    o%metrics_path = '/nonexistent/dir/m.jsonl'
    deallocate (o%checkpoint_dir)
    rc = clt_trainer_trace_start(ft)
    call check(rc == CLT_OK, 'trace start: ' // clt_error_message())
    rc = clt_trainer_fit(ft, train, test)
    call require(rc == CLT_OK, 'fit')
    rc = clt_trainer_trace_save(ft, 'test_fortran_trace.json')
    call check(rc == CLT_OK, 'trace save: ' // clt_error_message())
    call check(clt_trainer_steps_done(ft) == 3 * ntrain / 32, 'fit ran every step of its epochs')
    call check(clt_trainer_replicas(ft) == nranks * clt_devices_count(mine), 'the replicas of all ranks')
    call check(clt_trainer_stages(ft) == 1, 'no pipeline: one stage')
    rc = clt_trainer_evaluate(ft, test, l, a)
    call check(rc == CLT_OK .and. ieee_is_finite(l) .and. a > 0.8, 'evaluate after fit: accuracy above 0.8')
    if (rank == 0) print '(a, f8.5, a, f6.3)', 'fit: test loss ', l, ', accuracy ', a
    if (rank == 0) then
       call check(seen(CLT_EVENT_EPOCH) == 3 .and. seen(CLT_EVENT_STEP) >= 3 * ntrain / 32 / 4, &
            'the callback saw every epoch and the step records')
       call check(seen_step > 0 .and. ieee_is_finite(seen_loss), 'a step event''s numbers')
       lines = 0
       open (newunit=u, file='test_fortran_metrics.jsonl', status='old', action='read', iostat=ios)
       do while (ios == 0)
          read (u, *, iostat=ios)
          if (ios == 0) lines = lines + 1
       end do
       if (lines > 0) close (u)
       call check(lines >= 4, 'fit wrote the metrics file')
       inquire (file='test_fortran_trace.json', exist=there)
       call check(there, 'the trace was written')
    end if
    rc = clt_trainer_resume_latest(ft, 'test_fortran_ckpts', loaded)
    call check(rc == CLT_OK .and. index(loaded, 'ckpt-0000000036') > 0, &
         'fit''s checkpoints: the latest resumes: ' // loaded // ' ' // clt_error_message())
    rc = clt_trainer_set_normalization(ft, CLT_NORMALIZE_STANDARD, shift, scale(1:2))
    call check(rc == CLT_EINVAL .and. index(clt_error_message(), 'scale 2') > 0, &
         'a trainer''s normalisation of the wrong size: ' // clt_error_message())
    scale = 2
    call check(clt_trainer_set_normalization(ft, CLT_NORMALIZE_STANDARD, shift, scale) == CLT_OK .and. &
         clt_trainer_set_normalization(ft, CLT_NORMALIZE_NONE) == CLT_OK, 'a trainer''s normalisation, set and cleared')
    rc = clt_trainer_resume_latest(ft, 'test_fortran_no_such_dir')
    call check(rc == CLT_ENOTFOUND, 'no checkpoint directory: CLT_ENOTFOUND')
    call clt_trainer_destroy(ft)
    call clt_dataset_destroy(train)
    call clt_dataset_destroy(test)
    call remove_file(trim(trainf))
    call remove_file(trim(testf))
    if (rank == 0) call execute_command_line('rm -rf test_fortran_ckpts test_fortran_metrics.jsonl ' // &
         'test_fortran_trace.json')
  end subroutine test_fit

  ! fit and evaluate a regression trainer on a CSV of float targets
  ! (clt_dataset_open with target columns and regression), every rank its
  ! own file of the same rows, on a trainer of its own (fit goes on from
  ! the steps a trainer has done).
  subroutine test_regression_fit()
    type(clt_trainer_t) :: rt
    type(clt_options_t) :: o
    integer, parameter :: nrows = 96
    real(c_float) :: xr(nfeat, nrows), tr(2, nrows), xb(nfeat, 2), tb(2, 2)
    integer(c_int32_t) :: yr(nrows)
    type(clt_dataset_t) :: ds
    character(len=64) :: csv
    real(c_double) :: l0, rmse0, l1, rmse1
    integer :: u, j
    call cluster_data(xr, yr, 2)
    tr(1, :) = 0.5 * (xr(1, :) - xr(2, :))
    tr(2, :) = 0.25 * xr(3, :)
    write (csv, '(a, i0, a)') 'test_fortran_reg_r', rank, '.csv'
    open (newunit=u, file=trim(csv), status='replace', action='write')
    write (u, '(a)') 'a,b,c,d,t1,t2'
    do j = 1, nrows
       write (u, '(5(es16.8e2, ","), es16.8e2)') xr(:, j), tr(:, j)
    end do
    close (u)
    rc = clt_dataset_open(trim(csv), ds, target='t1,t2', regression=.true.)
    call require(rc == CLT_OK, 'a CSV of float targets')
    call check(clt_dataset_count(ds) == nrows .and. clt_dataset_targets_per_sample(ds) == 2 .and. &
         clt_dataset_sample_size(ds) == nfeat, 'the CSV''s rows, features and targets')
    rc = clt_dataset_get_batch_targets(ds, [0_c_int64_t, 5_c_int64_t], xb, tb)
    call check(rc == CLT_OK .and. all(abs(tb(:, 1) - tr(:, 1)) < 1e-6) .and. all(abs(tb(:, 2) - tr(:, 6)) < 1e-6) &
         .and. all(abs(xb(:, 2) - xr(:, 6)) < 1e-6), 'float targets read back from the CSV')
    call clt_options_default(o)
    o%batch = 16
    o%epochs = 4
    o%optimizer = CLT_OPT_ADAM
    o%momentum = 0
    o%lr = 0.01
    call require(clt_trainer_create(regmodel, mine, comm, o, rt) == CLT_OK, 'a regression trainer for fit')
    call require(clt_trainer_evaluate(rt, ds, l0, rmse0) == CLT_OK, 'evaluate a regression set')
    rc = clt_trainer_fit(rt, ds)
    call require(rc == CLT_OK, 'fit on float targets')
    call require(clt_trainer_evaluate(rt, ds, l1, rmse1) == CLT_OK, 'evaluate a regression set')
    if (rank == 0) print '(a, f8.5, a, f8.5)', 'regression fit: RMSE ', rmse0, ' -> ', rmse1
    call check(ieee_is_finite(rmse1) .and. rmse1 < rmse0 .and. abs(rmse1 - sqrt(l1)) < 1e-5, &
         'fit lowers the RMSE on float targets (evaluate''s accuracy is the RMSE, MSE''s root)')
    rc = clt_trainer_fit(rt, nods)
    call check(rc == CLT_EINVAL, 'fit on a dataset never made: ' // clt_error_message())
    call clt_trainer_destroy(rt)
    call clt_dataset_destroy(ds)
    call remove_file(trim(csv))
  end subroutine test_regression_fit

  ! n samples of the three clusters, a different draw for each `which`.
  subroutine cluster_data(xb, yb, which)
    real(c_float), intent(out) :: xb(:, :)
    integer(c_int32_t), intent(out) :: yb(:)
    integer, intent(in) :: which
    integer :: j, k
    do j = 1, size(yb)
       yb(j) = int(mod(j, nclass), c_int32_t)
       do k = 1, nfeat
          xb(k, j) = merge(1.5, -0.5, k == yb(j) + 1) + 0.3 * sin(real(7 * j + 13 * k + 101 * which))
       end do
    end do
  end subroutine cluster_data

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
