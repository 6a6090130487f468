#include <cmath>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"

namespace strata::ref {

namespace {

// torch.optim.AdamW on the scaled gradient: decoupled weight decay, then the bias-corrected Adam step
// (adamw and adamw_with_copy).
void adamw(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  double lr = attrs.get_float("lr");
  double beta1 = attrs.get_float("beta1");
  double beta2 = attrs.get_float("beta2");
  double eps = attrs.get_float("eps");
  double weight_decay = attrs.get_float("weight_decay");
  double step = attrs.get_float("step");
  double grad_scale = attrs.get_float("grad_scale");
  if (step < 1) fail("op 'adamw': attribute 'step' counts from 1, got {}", step);
  double correction1 = 1.0 - std::pow(beta1, step);
  double correction2 = 1.0 - std::pow(beta2, step);

  std::vector<double> param = load(in[0]);
  std::vector<double> grad = load(in[1]);  // any floating dtype; param, m and v are f32
  for (double& g : grad) g *= grad_scale;
  std::vector<double> m = load(in[2]);
  std::vector<double> v = load(in[3]);
  for (size_t i = 0; i < param.size(); ++i) {
    param[i] *= 1.0 - lr * weight_decay;
    m[i] = beta1 * m[i] + (1.0 - beta1) * grad[i];
    v[i] = beta2 * v[i] + (1.0 - beta2) * grad[i] * grad[i];
    param[i] -= lr * (m[i] / correction1) / (std::sqrt(v[i] / correction2) + eps);
  }
  store(out[0], param);
  store(out[1], m);
  store(out[2], v);
  // adamw_with_copy: the updated parameter as stored (f32), rounded once more to the copy's dtype.
  if (out.size() > 3) store(out[3], load(out[0]));
}

}  // namespace

// The schema makes param, m and v f32, so f32 is the only key the dispatcher asks for.
void register_adamw(Backend& backend) {
  backend.add_kernel("adamw", DType::F32, adamw);
  backend.add_kernel("adamw_with_copy", DType::F32, adamw);
}

}  // namespace strata::ref
