// activation.cl: elementwise activations and their derivatives, computed in
// float; x, y, dy and dx are stored as act_t (float, or half with
// -DCLT_HALF: cl/prelude.cl).
// `act` is clt_nn_act (src/nn/nn.h). The host builds one program per
// activation with -DACT=<act>, which turns the switch into straight-line
// code: a switch on a kernel argument kept PoCL from vectorizing the
// work-item loop and made relu 30x slower than a copy. Without ACT the
// argument decides. Offsets are in elements; kernels are launched over
// exactly n items (clt__launch_exact_1d), so they test no bound, which
// would keep PoCL from vectorizing them.

#define ACT_RELU 0
#define ACT_LEAKY_RELU 1
#define ACT_GELU 2
#define ACT_TANH 3
#define ACT_SIGMOID 4
#define ACT_SILU 5

// GELU, tanh approximation (as PyTorch's approximate='tanh' and GPT-2):
// 0.5 x (1 + tanh u) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as the
// equal x g, g = sigmoid(2u) = 1 / (1 + exp(-2u)): exp costs PoCL less than
// tanh (GELU over 2048 x 512: forward 1.35 -> 0.83 ms, backward 1.6 ->
// 1.1), and saturates cleanly: exp(-2u) overflows to inf (g = 0, y = -0) or
// underflows to 0 (g = 1, y = x), where the derivative's g (1 - g), which
// stands for (1 - tanh^2 u) / 4, is exactly 0.
//
// SiLU (Llama's MLP activation, PyTorch's F.silu): x sigmoid(x), and its
// derivative s (1 + x (1 - s)), s = sigmoid(x); exp(-x) overflowing to inf
// gives s = 0 and y = -0 exactly.
//
// tanh1 (the tanh activation) saturates to exactly +-1 from |x| >= 10,
// where that is the correctly rounded float: PoCL's tanh stops 1 ulp short
// (0.99999994).
#define GELU_C 0.7978845608028654f // sqrt(2 / pi)
#define GELU_A 0.044715f

float tanh1(float x) { return fabs(x) >= 10.0f ? copysign(1.0f, x) : tanh(x); }

float act_value(int act, float x, float alpha) {
  switch (act) {
  case ACT_RELU: return x > 0.0f ? x : 0.0f;
  case ACT_LEAKY_RELU: return x > 0.0f ? x : alpha * x;
  case ACT_GELU: return x / (1.0f + exp(-2.0f * GELU_C * (x + GELU_A * x * x * x)));
  case ACT_TANH: return tanh1(x);
  case ACT_SILU: return x / (1.0f + exp(-x));
  default: return 1.0f / (1.0f + exp(-x));
  }
}

// The derivative from s, which is the forward's input x for leaky_relu,
// gelu and silu and its output y for relu, tanh and sigmoid.
float act_derivative(int act, float s, float alpha) {
  switch (act) {
  case ACT_RELU: return s > 0.0f ? 1.0f : 0.0f;
  case ACT_LEAKY_RELU: return s > 0.0f ? 1.0f : alpha;
  case ACT_GELU: {
    float x2 = s * s;
    float g = 1.0f / (1.0f + exp(-2.0f * GELU_C * (s + GELU_A * x2 * s)));
    return g + 2.0f * s * g * (1.0f - g) * GELU_C * (1.0f + 3.0f * GELU_A * x2);
  }
  case ACT_TANH: return 1.0f - s * s;
  case ACT_SILU: {
    float g = 1.0f / (1.0f + exp(-s));
    return g * (1.0f + s * (1.0f - g));
  }
  default: return s * (1.0f - s);
  }
}

#ifdef ACT
#define ACT_OF(arg) ACT
#else
#define ACT_OF(arg) (arg)
#endif

// y = act(x)
__kernel void act_forward(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                          const ulong n, const int act, const float alpha) {
  size_t i = get_global_id(0);
  ASTORE(y, yoff + i, act_value(ACT_OF(act), ALOAD(x, xoff + i), alpha));
}

// dx = dy * act'(s)
__kernel void act_backward(__global const act_t *s, const ulong soff, __global const act_t *dy, const ulong dyoff,
                           __global act_t *dx, const ulong dxoff, const ulong n, const int act, const float alpha) {
  size_t i = get_global_id(0);
  ASTORE(dx, dxoff + i, ALOAD(dy, dyoff + i) * act_derivative(ACT_OF(act), ALOAD(s, soff + i), alpha));
}

#if defined(ACT) && (ACT == ACT_GELU || ACT == ACT_SILU)
// GELU and SiLU 16 elements a work-item, as one float16, for PoCL (the
// host's choice where 16 divides n): its item loop over the scalar kernels
// above is vectorized 8 wide, and a float16 in a function's arguments lets
// LLVM use 512-bit registers where the CPU has them (GELU over 2048 x 512:
// forward 1.35 -> 0.83 ms; SiLU over 8 x 16 x 64 x 64: forward 0.50 ->
// 0.25, backward 0.69 -> 0.30). The same formulas, elementwise.
float16 act_load16(__global const act_t *p, const ulong i) {
#ifdef CLT_HALF
  return (float16)(aload8(p, i), aload8(p, i + 8));
#else
  return vload16(0, p + i);
#endif
}
void act_store16(__global act_t *p, const ulong i, const float16 v) {
#ifdef CLT_HALF
  astore8(p, i, v.lo);
  astore8(p, i + 8, v.hi);
#else
  vstore16(v, 0, p + i);
#endif
}
#endif

#if defined(ACT) && ACT == ACT_GELU
float16 gelu_exp16(const float16 x) { return exp(-2.0f * GELU_C * (x + GELU_A * x * x * x)); }

__kernel void gelu_forward16(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff) {
  const ulong i = get_global_id(0) * 16;
  const float16 v = act_load16(x, xoff + i);
  act_store16(y, yoff + i, v / (1.0f + gelu_exp16(v)));
}

__kernel void gelu_backward16(__global const act_t *s, const ulong soff, __global const act_t *dy, const ulong dyoff,
                              __global act_t *dx, const ulong dxoff) {
  const ulong i = get_global_id(0) * 16;
  const float16 v = act_load16(s, soff + i), x2 = v * v;
  const float16 g = 1.0f / (1.0f + exp(-2.0f * GELU_C * (v + GELU_A * x2 * v)));
  const float16 d = g + 2.0f * v * g * (1.0f - g) * GELU_C * (1.0f + 3.0f * GELU_A * x2);
  act_store16(dx, dxoff + i, act_load16(dy, dyoff + i) * d);
}
#endif

#if defined(ACT) && ACT == ACT_SILU
__kernel void silu_forward16(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff) {
  const ulong i = get_global_id(0) * 16;
  const float16 v = act_load16(x, xoff + i);
  act_store16(y, yoff + i, v / (1.0f + exp(-v)));
}

__kernel void silu_backward16(__global const act_t *s, const ulong soff, __global const act_t *dy, const ulong dyoff,
                              __global act_t *dx, const ulong dxoff) {
  const ulong i = get_global_id(0) * 16;
  const float16 v = act_load16(s, soff + i), g = 1.0f / (1.0f + exp(-v));
  act_store16(dx, dxoff + i, act_load16(dy, dyoff + i) * (g * (1.0f + v * (1.0f - g))));
}
#endif
