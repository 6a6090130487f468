// add, scale, gelu(_backward), cast, adamw(_with_copy) and fused_elementwise1..4 on an OpenCL device:
// one work-item per element. The formulas and the order of their f32 operations are the cpu
// kernels' (cpu_elementwise.cpp, cpu_adamw.cpp, cpu_fused.cpp) with FP contraction off, so gelu's
// polynomial e^x gives the bits of the cpu's baseline clone and the fused program's registers the
// bits of the unfused opencl ops. Storage other than f32 (bf16, f16, f64) goes through the source's
// load and store helpers: bf16 by integer rounding as core/dtype.h does, f16 through OpenCL 1.2's
// vload_half / vstore_half_rte (no cl_khr_fp16 needed), f64 by assembling its bits (no cl_khr_fp64).
// Every output element is written by the work-item that read its inputs, so outputs may alias inputs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/opencl/launch.h"
#include "backends/opencl/opencl_ops.h"
#include "ops/fused_program.h"

namespace strata::opencl {

namespace {

constexpr size_t kGroup = 256;

// Storage codes the kernels switch on.
enum StorageCode : cl_uint { kF32 = 0, kBF16 = 1, kF16 = 2, kF64 = 3 };

cl_uint storage_code(DType dtype, const char* op) {
  switch (dtype) {
    case DType::F32: return kF32;
    case DType::BF16: return kBF16;
    case DType::F16: return kF16;
    case DType::F64: return kF64;
    default: break;
  }
  fail("op '{}': the opencl backend cannot store {} values", op, dtype_name(dtype));
}

const std::string kSource = R"CLC(
#pragma OPENCL FP_CONTRACT OFF

#define STORE_F32 0u
#define STORE_BF16 1u
#define STORE_F16 2u
#define STORE_F64 3u

// Round to nearest even; NaN stays NaN (quiet), subnormals are kept.
ushort bf16_bits(float value) {
  uint word = as_uint(value);
  if ((word & 0x7fffffffu) > 0x7f800000u) return (ushort)((word >> 16) | 0x40u);
  return (ushort)((word + 0x7fffu + ((word >> 16) & 1u)) >> 16);
}

// An f32 widened exactly to the bits of an f64.
ulong f64_bits(float value) {
  uint word = as_uint(value);
  ulong sign = (ulong)(word >> 31) << 63;
  uint exponent = (word >> 23) & 0xffu;
  uint mantissa = word & 0x7fffffu;
  if (exponent == 0xffu) return sign | (0x7ffUL << 52) | ((ulong)mantissa << 29);
  if (exponent == 0u) {
    if (mantissa == 0u) return sign;
    int top = 31 - (int)clz(mantissa);  // a subnormal is mantissa * 2^-149: normalise on its top bit
    ulong fraction = (ulong)(mantissa ^ (1u << top)) << (52 - top);
    return sign | ((ulong)(top - 149 + 1023) << 52) | fraction;
  }
  return sign | ((ulong)(exponent - 127u + 1023u) << 52) | ((ulong)mantissa << 29);
}

float load_as_f32(__global const uchar* data, ulong index, uint code) {
  if (code == STORE_BF16) return as_float((uint)((__global const ushort*)data)[index] << 16);
  if (code == STORE_F16) return vload_half(index, (__global const half*)data);
  return ((__global const float*)data)[index];
}

void store_from_f32(__global uchar* data, ulong index, uint code, float value) {
  if (code == STORE_BF16) ((__global ushort*)data)[index] = bf16_bits(value);
  else if (code == STORE_F16) vstore_half_rte(value, index, (__global half*)data);
  else if (code == STORE_F64) ((__global ulong*)data)[index] = f64_bits(value);
  else ((__global float*)data)[index] = value;
}

// value as the dtype `code` holds it (an f32 register of the fused program).
float round_to(float value, uint code) {
  if (code == STORE_BF16) return as_float((uint)bf16_bits(value) << 16);
  if (code == STORE_F16) {
    ushort bits;
    vstore_half_rte(value, 0, (__private half*)&bits);
    return vload_half(0, (__private const half*)&bits);
  }
  return value;
}

#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBIC 0.044715f

// simd.h's exp_approx: Cephes' polynomial after reducing by ln 2, 2^n built in the exponent bits.
float exp_approx(float x) {
  float c = x < -87.0f ? -87.0f : x;
  c = c > 88.0f ? 88.0f : c;
  float shifted = c * 1.44269504088896341f + 12582912.0f;
  float n = shifted - 12582912.0f;
  int exponent = as_int(shifted) - 0x4B400000;
  float r = c - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  float result = p * as_float((exponent + 127) << 23);
  return x < -87.0f ? 0.0f : result;
}

// x sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3): nothing cancels in either tail.
float gelu_of(float v) {
  float e = exp_approx(-2.0f * GELU_SCALE * (v + GELU_CUBIC * v * v * v));
  return v / (1.0f + e);
}

float gelu_backward_of(float dy, float v) {
  float e = exp_approx(-2.0f * GELU_SCALE * (v + GELU_CUBIC * v * v * v));
  float s = 1.0f / (1.0f + e);
  float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * v * v);
  float one_minus_s = e * s;
  return dy * s * (1.0f + 2.0f * v * du_dx * one_minus_s);
}

// b repeats every b_count elements of a (a suffix of a's shape, or a scalar).
__kernel void add(__global const float* a, ulong a_off, __global const float* b, ulong b_off,
                  __global float* out, ulong out_off, ulong b_count, ulong n) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  out[out_off + i] = a[a_off + i] + b[b_off + i % b_count];
}

__kernel void scale(__global const float* x, ulong x_off, __global float* out, ulong out_off, float factor,
                    ulong n) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  out[out_off + i] = x[x_off + i] * factor;
}

__kernel void gelu(__global const float* x, ulong x_off, __global float* y, ulong y_off, ulong n) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  y[y_off + i] = gelu_of(x[x_off + i]);
}

__kernel void gelu_backward(__global const float* dy, ulong dy_off, __global const float* x, ulong x_off,
                            __global float* dx, ulong dx_off, ulong n) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  dx[dx_off + i] = gelu_backward_of(dy[dy_off + i], x[x_off + i]);
}

// Through f32, which holds bf16 and f16 exactly: each element is rounded once.
__kernel void cast(__global const uchar* x, ulong x_off, __global uchar* y, ulong y_off, uint from, uint to,
                   ulong n) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  store_from_f32(y, y_off + i, to, load_as_f32(x, x_off + i, from));
}

// cpu_adamw.cpp's step, its constants folded on the host in double and rounded to f32 there.
// copy_code: STORE_BF16 or STORE_F16 writes the updated parameter to `copy`, STORE_F32 nothing.
__kernel void adamw(__global const float* param, ulong param_off, __global const uchar* grad, ulong grad_off,
                    __global const float* m, ulong m_off, __global const float* v, ulong v_off,
                    __global float* param_out, ulong param_out_off, __global float* m_out, ulong m_out_off,
                    __global float* v_out, ulong v_out_off, __global uchar* copy, ulong copy_off, uint grad_code,
                    uint copy_code, float grad_scale, float decay, float beta1, float beta2, float step_size,
                    float inv_sqrt_bias_correction2, float eps, ulong n) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  float g = load_as_f32(grad, grad_off + i, grad_code) * grad_scale;
  float m_new = beta1 * m[m_off + i] + (1.0f - beta1) * g;
  float v_new = beta2 * v[v_off + i] + (1.0f - beta2) * g * g;
  float denom = sqrt(v_new) * inv_sqrt_bias_correction2 + eps;
  float updated = param[param_off + i] * decay - step_size * m_new / denom;
  param_out[param_out_off + i] = updated;
  m_out[m_out_off + i] = m_new;
  v_out[v_out_off + i] = v_new;
  if (copy_code != STORE_F32) store_from_f32(copy, copy_off + i, copy_code, updated);
}

#define OP_ADD 0u
#define OP_SCALE 1u
#define OP_GELU 2u
#define OP_GELU_BACKWARD 3u
#define OP_CAST 4u

// A fused program (ops/fused_program.h) interpreted per element. Registers 0..3 are the inputs
// (element i of input k is element i mod counts[k] of its storage); code word j = opcode | a << 4 |
// b << 9 | dtype << 14 computes register 4 + j, rounded to its dtype. The output is the last register.
__kernel void fused_elementwise(__global const uchar* x0, ulong x0_off, __global const uchar* x1, ulong x1_off,
                                __global const uchar* x2, ulong x2_off, __global const uchar* x3, ulong x3_off,
                                __global uchar* out, ulong out_off, uint4 input_codes, ulong4 counts,
                                uint inputs, uint16 code, float16 factors, uint instructions, uint out_code,
                                ulong n) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  uint words[16];
  float scales[16];
  vstore16(code, 0, words);
  vstore16(factors, 0, scales);
  float registers[4 + 16];
  registers[0] = load_as_f32(x0, x0_off + i % counts.s0, input_codes.s0);
  if (inputs > 1) registers[1] = load_as_f32(x1, x1_off + i % counts.s1, input_codes.s1);
  if (inputs > 2) registers[2] = load_as_f32(x2, x2_off + i % counts.s2, input_codes.s2);
  if (inputs > 3) registers[3] = load_as_f32(x3, x3_off + i % counts.s3, input_codes.s3);
  float result = 0.0f;
  for (uint j = 0; j < instructions; ++j) {
    uint word = words[j];
    uint opcode = word & 15u;
    float a = registers[(word >> 4) & 31u];
    float b = registers[(word >> 9) & 31u];
    if (opcode == OP_ADD) result = a + b;
    else if (opcode == OP_SCALE) result = a * scales[j];
    else if (opcode == OP_GELU) result = gelu_of(a);
    else if (opcode == OP_GELU_BACKWARD) result = gelu_backward_of(a, b);
    else result = a;
    result = round_to(result, (word >> 14) & 3u);
    registers[4 + j] = result;
  }
  store_from_f32(out, out_off + i, out_code, result);
}
)CLC";

cl_ulong count_of(const Tensor& tensor) { return static_cast<cl_ulong>(tensor.numel()); }

void add(const Tensors& in, const Tensors& out, const Attrs&) {
  const cl_ulong b_count = count_of(in[1]);
  if (b_count == 0) return;  // then a is empty too
  Launch(out[0], kSource, "add")
      .tensor(in[0])
      .tensor(in[1])
      .tensor(out[0])
      .value<cl_ulong>(b_count)
      .value<cl_ulong>(count_of(out[0]))
      .run(out[0].numel(), kGroup);
}

void scale(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  Launch(out[0], kSource, "scale")
      .tensor(in[0])
      .tensor(out[0])
      .value<cl_float>(static_cast<float>(attrs.get_float("factor")))
      .value<cl_ulong>(count_of(out[0]))
      .run(out[0].numel(), kGroup);
}

void gelu(const Tensors& in, const Tensors& out, const Attrs&) {
  Launch(out[0], kSource, "gelu")
      .tensor(in[0])
      .tensor(out[0])
      .value<cl_ulong>(count_of(out[0]))
      .run(out[0].numel(), kGroup);
}

void gelu_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  Launch(out[0], kSource, "gelu_backward")
      .tensor(in[0])
      .tensor(in[1])
      .tensor(out[0])
      .value<cl_ulong>(count_of(out[0]))
      .run(out[0].numel(), kGroup);
}

void cast(const Tensors& in, const Tensors& out, const Attrs&) { cast_on_device(in[0], out[0]); }

}  // namespace

void cast_on_device(const Tensor& x, const Tensor& y) {
  if (x.dtype() == y.dtype()) {
    device_of(y).copy(x.buffer(), x.offset_bytes(), y.buffer(), y.offset_bytes(), y.nbytes());
    return;
  }
  Launch(y, kSource, "cast")
      .tensor(x)
      .tensor(y)
      .value<cl_uint>(storage_code(x.dtype(), "cast"))
      .value<cl_uint>(storage_code(y.dtype(), "cast"))
      .value<cl_ulong>(count_of(y))
      .run(y.numel(), kGroup);
}

namespace {

// `copy`: adamw_with_copy's fourth output, or nullptr for adamw.
void run_adamw(const Tensors& in, const Tensors& out, const Attrs& attrs, const Tensor* copy) {
  const double lr = attrs.get_float("lr");
  const double beta1 = attrs.get_float("beta1");
  const double beta2 = attrs.get_float("beta2");
  const double step = attrs.get_float("step");
  if (step < 1) fail("op 'adamw': attribute 'step' counts from 1, got {}", step);
  const DType grad_dtype = in[1].dtype();
  if (grad_dtype != DType::F32 && grad_dtype != DType::BF16 && grad_dtype != DType::F16) {
    fail("op 'adamw': the opencl backend takes f32, bf16 or f16 grads, got {}", dtype_name(grad_dtype));
  }
  Launch(out[0], kSource, "adamw")
      .tensor(in[0])
      .tensor(in[1])
      .tensor(in[2])
      .tensor(in[3])
      .tensor(out[0])
      .tensor(out[1])
      .tensor(out[2])
      .tensor(copy != nullptr ? *copy : out[0])
      .value<cl_uint>(storage_code(grad_dtype, "adamw"))
      .value<cl_uint>(copy != nullptr ? storage_code(copy->dtype(), "adamw_with_copy") : kF32)
      .value<cl_float>(static_cast<float>(attrs.get_float("grad_scale")))
      .value<cl_float>(static_cast<float>(1.0 - lr * attrs.get_float("weight_decay")))
      .value<cl_float>(static_cast<float>(beta1))
      .value<cl_float>(static_cast<float>(beta2))
      .value<cl_float>(static_cast<float>(lr / (1.0 - std::pow(beta1, step))))
      .value<cl_float>(static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2, step))))
      .value<cl_float>(static_cast<float>(attrs.get_float("eps")))
      .value<cl_ulong>(count_of(out[0]))
      .run(out[0].numel(), kGroup);
}

void adamw(const Tensors& in, const Tensors& out, const Attrs& attrs) { run_adamw(in, out, attrs, nullptr); }

void adamw_with_copy(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const DType copy = out[3].dtype();
  if (copy != DType::BF16 && copy != DType::F16) {
    fail("op 'adamw_with_copy': the opencl backend copies to bf16 or f16, got {}", dtype_name(copy));
  }
  run_adamw(in, out, attrs, &out[3]);
}

constexpr int kInputRegisters = 4;  // the kernel's input registers, one per input slot
static_assert(kMaxFusedInputs <= kInputRegisters && kMaxFusedInstructions <= 16);

cl_uint opcode_of(FusedOpcode opcode) {
  switch (opcode) {
    case FusedOpcode::Add: return 0;
    case FusedOpcode::Scale: return 1;
    case FusedOpcode::Gelu: return 2;
    case FusedOpcode::GeluBackward: return 3;
    case FusedOpcode::Cast: return 4;
  }
  return 4;
}

// The program's registers renumbered for the kernel, whose instructions start at register 4 whatever
// the number of inputs.
cl_uint kernel_register(int program_register, int num_inputs) {
  return static_cast<cl_uint>(program_register < num_inputs ? program_register
                                                            : program_register - num_inputs + kInputRegisters);
}

void fused_elementwise(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const int num_inputs = static_cast<int>(in.size());
  const std::string op = fused_elementwise_op(num_inputs);
  const FusedProgram program = FusedProgram::parse(attrs.get_string("program"), num_inputs);
  std::vector<DType> input_dtypes;
  for (const Tensor& tensor : in) input_dtypes.push_back(tensor.dtype());
  const std::vector<DType> dtypes = program.register_dtypes(input_dtypes);
  for (DType dtype : dtypes) {
    if (dtype == DType::F64) {
      fail("op '{}': the opencl kernel computes in f32 and cannot hold f64 values (program '{}')", op,
           attrs.get_string("program"));
    }
  }
  if (out[0].numel() == 0) return;
  cl_uint16 code{};
  cl_float16 factors{};
  for (size_t k = 0; k < program.code.size(); ++k) {
    const FusedInstruction& instruction = program.code[k];
    const cl_uint b = instruction.b >= 0 ? kernel_register(instruction.b, num_inputs) : 0;
    code.s[k] = opcode_of(instruction.opcode) | kernel_register(instruction.a, num_inputs) << 4 | b << 9 |
                storage_code(dtypes[static_cast<size_t>(num_inputs) + k], op.c_str()) << 14;
    factors.s[k] = static_cast<float>(instruction.factor);
  }
  cl_uint4 input_codes{};
  cl_ulong4 counts{};
  Launch launch(out[0], kSource, "fused_elementwise");
  for (int slot = 0; slot < kInputRegisters; ++slot) {
    const Tensor& input = in[static_cast<size_t>(std::min(slot, num_inputs - 1))];  // unused slots repeat the last
    launch.tensor(input);
    input_codes.s[slot] = storage_code(input.dtype(), op.c_str());
    counts.s[slot] = std::max<cl_ulong>(count_of(input), 1);
  }
  launch.tensor(out[0])
      .value<cl_uint4>(input_codes)
      .value<cl_ulong4>(counts)
      .value<cl_uint>(static_cast<cl_uint>(num_inputs))
      .value<cl_uint16>(code)
      .value<cl_float16>(factors)
      .value<cl_uint>(static_cast<cl_uint>(program.code.size()))
      .value<cl_uint>(storage_code(out[0].dtype(), op.c_str()))
      .value<cl_ulong>(count_of(out[0]))
      .run(out[0].numel(), kGroup);
}

}  // namespace

void register_elementwise(Backend& backend) {
  backend.add_kernel("add", DType::F32, add);
  backend.add_kernel("scale", DType::F32, scale);
  backend.add_kernel("gelu", DType::F32, gelu);
  backend.add_kernel("gelu_backward", DType::F32, gelu_backward);
  for (DType input : {DType::F32, DType::BF16, DType::F16}) backend.add_kernel("cast", input, cast);
  backend.add_kernel("adamw", DType::F32, adamw);
  backend.add_kernel("adamw_with_copy", DType::F32, adamw_with_copy);
  for (int n = 1; n <= kMaxFusedInputs; ++n) backend.add_kernel(fused_elementwise_op(n), DType::F32, fused_elementwise);
}

}  // namespace strata::opencl
