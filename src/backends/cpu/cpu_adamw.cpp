// AdamW as torch.optim.AdamW computes it (decoupled weight decay, bias
// corrections folded into the step size and the denominator). Element-wise,
// so the outputs may alias param, m and v.
#include <cmath>
#include <type_traits>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int64_t kGrain = 16384;

struct AdamwConstants {
  float grad_scale;  // clipping's factor, applied as the f32 scale op would
  float decay;       // 1 - lr * weight_decay
  float beta1, beta2;
  float step_size;   // lr / (1 - beta1^step)
  float inv_sqrt_bias_correction2;  // 1 / sqrt(1 - beta2^step)
  float eps;
};

inline float to_float(float value) { return value; }
inline float to_float(bf16 value) { return bf16_to_float(value); }
inline float to_float(fp16 value) { return fp16_to_float(value); }

struct NoCopy {};
inline bf16 narrowed(float value, bf16*) { return from_f32<bf16>(value); }
inline fp16 narrowed(float value, fp16*) { return float_to_fp16(value); }

// Copy: NoCopy (adamw), or bf16 / fp16 (adamw_with_copy writes the updated parameter rounded to it).
template <typename Grad, typename Copy>
STRATA_CPU_CLONES void adamw_range(const float* param, const Grad* grad, const float* m, const float* v,
                                   const AdamwConstants& k, float* param_out, float* m_out, float* v_out,
                                   Copy* copy, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float g = to_float(grad[i]) * k.grad_scale;
    float m_new = k.beta1 * m[i] + (1.0f - k.beta1) * g;
    float v_new = k.beta2 * v[i] + (1.0f - k.beta2) * g * g;
    float denom = sqrt_approx(v_new) * k.inv_sqrt_bias_correction2 + k.eps;
    const float updated = param[i] * k.decay - k.step_size * m_new / denom;
    param_out[i] = updated;
    m_out[i] = m_new;
    v_out[i] = v_new;
    if constexpr (!std::is_same_v<Copy, NoCopy>) copy[i] = narrowed(updated, copy);
  }
}

template <typename Copy>
void run_adamw(const Tensors& in, const Tensors& out, const Attrs& attrs, Copy* copy) {
  double lr = attrs.get_float("lr");
  double beta1 = attrs.get_float("beta1");
  double beta2 = attrs.get_float("beta2");
  double step = attrs.get_float("step");
  if (step < 1) fail("op 'adamw': attribute 'step' counts from 1, got {}", step);
  AdamwConstants k{
      .grad_scale = static_cast<float>(attrs.get_float("grad_scale")),
      .decay = static_cast<float>(1.0 - lr * attrs.get_float("weight_decay")),
      .beta1 = static_cast<float>(beta1),
      .beta2 = static_cast<float>(beta2),
      .step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, step))),
      .inv_sqrt_bias_correction2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2, step))),
      .eps = static_cast<float>(attrs.get_float("eps")),
  };
  const float* param = in[0].data<float>();
  const float* m = in[2].data<float>();
  const float* v = in[3].data<float>();
  float* param_out = out[0].data<float>();
  float* m_out = out[1].data<float>();
  float* v_out = out[2].data<float>();
  auto run = [&](const auto* grad) {
    parallel_chunks(in[0].numel(), kGrain, [&](int64_t begin, int64_t end) {
      adamw_range(param, grad, m, v, k, param_out, m_out, v_out, copy, begin, end);
    });
  };
  switch (in[1].dtype()) {
    case DType::F32: run(in[1].data<float>()); break;
    case DType::BF16: run(in[1].data<bf16>()); break;
    case DType::F16: run(in[1].data<fp16>()); break;
    default: fail("op 'adamw': the cpu backend takes f32, bf16 or f16 grads, got {}", dtype_name(in[1].dtype()));
  }
}

void adamw(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  run_adamw(in, out, attrs, static_cast<NoCopy*>(nullptr));
}

void adamw_with_copy(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  switch (out[3].dtype()) {
    case DType::BF16: return run_adamw(in, out, attrs, out[3].data<bf16>());
    case DType::F16: return run_adamw(in, out, attrs, out[3].data<fp16>());
    default: fail("op 'adamw_with_copy': the cpu backend copies to bf16 or f16, got {}", dtype_name(out[3].dtype()));
  }
}

}  // namespace

void register_adamw(Backend& backend) {
  backend.add_kernel("adamw", DType::F32, adamw);
  backend.add_kernel("adamw_with_copy", DType::F32, adamw_with_copy);
}

}  // namespace strata::cpu
