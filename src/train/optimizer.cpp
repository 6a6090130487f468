#include "train/optimizer.h"

#include <cmath>

namespace strata {

AdamW::AdamW(const ParameterSet& params, AdamWSettings settings) : settings_(settings) {
  for (size_t i = 0; i < params.size(); ++i) {
    m_.push_back(Tensor::zeros(params.tensor(i).shape(), DType::F32));
    v_.push_back(Tensor::zeros(params.tensor(i).shape(), DType::F32));
  }
}

void AdamW::update(ParameterSet& params, const std::vector<Tensor>& grads, double lr, int64_t step,
                   Dispatcher& dispatcher) {
  for (size_t i = 0; i < params.size(); ++i) {
    Attrs attrs{{"lr", lr},
                {"beta1", settings_.beta1},
                {"beta2", settings_.beta2},
                {"eps", settings_.eps},
                {"weight_decay", params.spec(i).decay ? settings_.weight_decay : 0.0},
                {"step", step}};
    Tensor& param = params.tensor(i);
    dispatcher.run("adamw", {param, grads[i], m_[i], v_[i]}, {param, m_[i], v_[i]}, attrs);
  }
}

double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, Dispatcher& dispatcher) {
  double total = 0;
  for (const Tensor& grad : grads) total += dispatcher.call("sum_squares", {grad})[0].item();
  double norm = std::sqrt(total);
  if (max_norm > 0 && norm > max_norm) {
    double factor = max_norm / (norm + 1e-6);
    for (Tensor& grad : grads) dispatcher.run("scale", {grad}, {grad}, {{"factor", factor}});
  }
  return norm;
}

}  // namespace strata
