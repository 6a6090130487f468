#pragma once
// How far AdamW can move one element of a parameter, whatever its gradients: the bound that judges
// parameters compared after steps in low precision. Where a gradient is below the rounding of bf16 or
// f16, AdamW's division by sqrt(v) turns that rounding into whole steps of either sign, so two correct
// runs' parameters can differ by up to the sum of both runs' reaches.
#include <cstdint>

namespace strata {

// The largest |m_hat / sqrt(v_hat)| of any update up to the `update`-th (from 1), over every gradient
// sequence: by Cauchy-Schwarz over the moments' sums, (1 - b1) sqrt(1 - b2^t) / ((1 - b1^t) sqrt(1 - b2))
// * sqrt(sum_{j<t} (b1^2 / b2)^j), which a gradient sequence proportional to (b1 / b2)^age reaches; the
// running maximum over t <= update (eps only lowers it). 1 at the first update; 1.165 in the limit for
// (0.9, 0.95); larger for a b2 near 1 (7.1 for 0.999). An update moves an element by at most lr times it
// (decoupled weight decay pulls both runs towards zero alike and does not widen their gap).
double adamw_step_reach(double beta1, double beta2, int64_t update);

// The reach of a run's updates summed over the steps compared: the most any element has moved since.
class AdamwReach {
 public:
  AdamwReach(double beta1, double beta2) : beta1_(beta1), beta2_(beta2) {}
  // The step's number in the run (its updates are at most that many) and its learning rate.
  void add_step(int64_t step, double lr) { total_ += lr * adamw_step_reach(beta1_, beta2_, step); }
  double total() const { return total_; }

 private:
  double beta1_, beta2_;
  double total_ = 0;
};

}  // namespace strata
