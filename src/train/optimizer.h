#pragma once
// AdamW with PyTorch's semantics, and global-norm gradient clipping, run
// through the op dispatcher so each backend supplies its own fused kernel.
#include <vector>

#include "model/parameters.h"
#include "ops/dispatcher.h"

namespace strata {

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied only to parameters whose spec says decay
};

class AdamW {
 public:
  AdamW(const ParameterSet& params, AdamWSettings settings);

  // One update with learning rate `lr`; `step` counts updates from 1.
  void update(ParameterSet& params, const std::vector<Tensor>& grads, double lr, int64_t step, Dispatcher& dispatcher);

  std::vector<Tensor>& first_moments() { return m_; }
  std::vector<Tensor>& second_moments() { return v_; }

 private:
  AdamWSettings settings_;
  std::vector<Tensor> m_, v_;
};

// The L2 norm of all gradients together; when `max_norm` > 0 and the norm
// exceeds it, scales every gradient by max_norm / (norm + 1e-6) as
// torch.nn.utils.clip_grad_norm_ does. Returns the norm before clipping.
double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, Dispatcher& dispatcher);

}  // namespace strata
