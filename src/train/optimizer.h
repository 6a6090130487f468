#pragma once
// AdamW with PyTorch's semantics, and global-norm gradient clipping, run
// through the op dispatcher so each backend supplies its own fused kernel.
#include <vector>

#include "core/exact_square_sum.h"
#include "model/parameters.h"
#include "ops/dispatcher.h"
#include "parallel/zero_partition.h"

namespace strata {

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied only to parameters whose spec says decay
};

class AdamW {
 public:
  // Keeps moments for, and updates, `ranges` of the parameters: all of every
  // parameter in one process or under ZeRO-0, this rank's share under ZeRO-1.
  AdamW(const ParameterSet& params, AdamWSettings settings, std::vector<ParameterRange> ranges);

  // One update of the owned ranges with learning rate `lr`; `step` counts
  // updates from 1; grads[r] is range r's gradient, flat, used times
  // `grad_scale` (clip_factor's; the gradients themselves are left as they are).
  void update(ParameterSet& params, const std::vector<Tensor>& grads, double lr, int64_t step, double grad_scale,
              Dispatcher& dispatcher);
  // Low-precision copies of the updated ranges (undefined where none), each written by the update itself
  // (adamw_with_copy).
  void keep_copies(std::vector<Tensor> copies);

  // Copies the owned ranges of the moments into, or from, whole per-parameter
  // tensors (elements outside the ranges are left alone).
  void export_moments(std::vector<Tensor>& first, std::vector<Tensor>& second) const;
  void import_moments(const std::vector<Tensor>& first, const std::vector<Tensor>& second);
  size_t state_bytes() const;  // this rank's moments
  const std::vector<ParameterRange>& ranges() const { return ranges_; }

 private:
  AdamWSettings settings_;
  std::vector<ParameterRange> ranges_;
  std::vector<Tensor> m_, v_;  // per range, flat
  std::vector<Tensor> copies_;  // per range, flat, or empty
};

// The squares of all gradients summed exactly (square_sum_exact): the global
// L2 norm is the square root of the sum over every piece of the gradients,
// and comes out the same bits however they are split over ranks.
ExactSquareSum square_sum(const std::vector<Tensor>& grads, Dispatcher& dispatcher);
// Global-norm clipping as torch.nn.utils.clip_grad_norm_: when `max_norm` > 0
// and `norm` exceeds it, every gradient is scaled by max_norm / (norm + 1e-6);
// otherwise by 1. AdamW applies the factor as it reads each gradient.
double clip_factor(double norm, double max_norm);

}  // namespace strata
