// LLaMA's rope and swiglu (and swiglu_backward) in f32, one work-item per rotated pair or element.
// rope takes inv_freq from ops/rope_frequencies.h (uploaded once per device and attrs) and
// computes each angle on the device as the host does: float(position) * inv_freq in f32, its cos
// and sin in f64 rounded to f32 (in f32 on a device without cl_khr_fp64: within a few ulps). The
// programs are built without FMA contraction, so each product and sum rounds as ref's and
// PyTorch's do. Every output element is written by the work-item that read its inputs, so
// outputs may alias inputs as the schemas allow.
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backends/opencl/launch.h"
#include "backends/opencl/opencl_ops.h"
#include "ops/rope_frequencies.h"

namespace strata::opencl {

namespace {

constexpr size_t kGroup = 256;

const std::string kRopeSource = R"CLC(
#pragma OPENCL FP_CONTRACT OFF
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

// x [rows, heads, 2 half] with row = b * seq + t at positions[t]: dim i < half pairs with i + half.
__kernel void rope(__global const float* x, ulong x_off, __global const int* positions, ulong positions_off,
                   __global const float* inv_freq, ulong inv_freq_off, __global float* y, ulong y_off, ulong seq,
                   ulong heads, ulong half_dim, int inverse, ulong pairs) {
  const ulong i = get_global_id(0);
  if (i >= pairs) return;
  const ulong pair = i % half_dim, head_row = i / half_dim;
  const ulong t = (head_row / heads) % seq;
  const float angle = (float)positions[positions_off + t] * inv_freq[inv_freq_off + pair];
#ifdef cl_khr_fp64
  const float c = (float)cos((double)angle), s = (float)sin((double)angle);
#else
  const float c = cos(angle), s = sin(angle);
#endif
  const float sine = inverse ? -s : s;
  const ulong first = head_row * 2 * half_dim + pair, second = first + half_dim;
  const float a = x[x_off + first], b = x[x_off + second];
  y[y_off + first] = a * c - b * sine;
  y[y_off + second] = b * c + a * sine;
}
)CLC";

// e^-g is clamped at e^88 (finite), so s = 1 / (1 + e^-g) saturates to 0 and e^-g s never is inf * 0.
const std::string kSwigluSource = R"CLC(
#pragma OPENCL FP_CONTRACT OFF

__kernel void swiglu(__global const float* gate, ulong gate_off, __global const float* up, ulong up_off,
                     __global float* y, ulong y_off, ulong count) {
  const ulong i = get_global_id(0);
  if (i >= count) return;
  const float g = gate[gate_off + i];
  const float s = 1.0f / (1.0f + exp(fmin(-g, 88.0f)));
  y[y_off + i] = g * s * up[up_off + i];
}

// 1 - s is written as e^-g s, which does not cancel where s nears 1.
__kernel void swiglu_backward(__global const float* dy, ulong dy_off, __global const float* gate, ulong gate_off,
                              __global const float* up, ulong up_off, __global float* dgate, ulong dgate_off,
                              __global float* dup, ulong dup_off, ulong count) {
  const ulong i = get_global_id(0);
  if (i >= count) return;
  const float d = dy[dy_off + i], g = gate[gate_off + i], u = up[up_off + i];
  const float e = exp(fmin(-g, 88.0f));
  const float s = 1.0f / (1.0f + e);
  dgate[dgate_off + i] = d * u * s * (1.0f + g * (e * s));
  dup[dup_off + i] = d * g * s;
}
)CLC";

// inv_freq of `params` on `device`, uploaded on first use (an upload waits for the queue to drain).
const Tensor& inv_freq_on(const OpenCLDevice& device, const RopeParams& params) {
  using Key = std::tuple<const OpenCLDevice*, int64_t, double, std::string, double, double, double, int64_t>;
  static std::mutex mutex;
  static std::map<Key, Tensor> uploaded;
  std::lock_guard lock(mutex);
  Tensor& table = uploaded[Key{&device, params.head_dim, params.theta, params.scaling, params.factor,
                               params.low_freq_factor, params.high_freq_factor, params.original_max_positions}];
  if (!table.defined()) {
    std::vector<float> inv_freq = rope_inv_freq(params);
    table = Tensor::empty({static_cast<int64_t>(inv_freq.size())}, DType::F32, device);
    table.copy_from(Tensor::borrow(inv_freq.data(), table.shape(), DType::F32));
  }
  return table;
}

void rope(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const RopeParams params = rope_params("rope", attrs);
  const Tensor& x = in[0];
  const size_t half = static_cast<size_t>(params.head_dim / 2);
  const size_t pairs = static_cast<size_t>(x.numel()) / 2;
  const Tensor& inv_freq = inv_freq_on(device_of(x), params);
  Launch(x, kRopeSource, "rope")
      .tensor(x).tensor(in[1]).tensor(inv_freq).tensor(out[0])
      .value<cl_ulong>(static_cast<size_t>(x.size(1)))
      .value<cl_ulong>(static_cast<size_t>(x.size(2) / params.head_dim))
      .value<cl_ulong>(half).value<cl_int>(params.inverse ? 1 : 0).value<cl_ulong>(pairs)
      .run(pairs, kGroup);
}

void swiglu(const Tensors& in, const Tensors& out, const Attrs&) {
  const size_t count = static_cast<size_t>(in[0].numel());
  Launch(out[0], kSwigluSource, "swiglu").tensor(in[0]).tensor(in[1]).tensor(out[0]).value<cl_ulong>(count)
      .run(count, kGroup);
}

void swiglu_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const size_t count = static_cast<size_t>(in[0].numel());
  Launch(out[0], kSwigluSource, "swiglu_backward")
      .tensor(in[0]).tensor(in[1]).tensor(in[2]).tensor(out[0]).tensor(out[1]).value<cl_ulong>(count)
      .run(count, kGroup);
}

}  // namespace

void register_rope_swiglu(Backend& backend) {
  backend.add_kernel("rope", DType::F32, rope);
  backend.add_kernel("swiglu", DType::F32, swiglu);
  backend.add_kernel("swiglu_backward", DType::F32, swiglu_backward);
}

}  // namespace strata::opencl
