#include "planner/loss_work.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace strata {

LossKernel parse_loss_kernel(const std::string& text, const std::string& what) {
  if (text == "fused") return LossKernel::Fused;
  if (text == "eager-f32") return LossKernel::EagerF32;
  fail("{} must be fused or eager-f32, got '{}'", what, text);
}

LossExtra eager_f32_loss_extra(double a) {
  constexpr double f = 4;  // fp32
  const double cast = a == f ? 0 : a + f;  // float() copies only when the logits are narrower
  // Forward: float(), log_softmax f+f. Backward: nll_loss's zeroed gradient f, log_softmax's 3f, float()'s.
  // Fused: the logits read forward; read and their gradient written backward.
  return {cast + 2 * f - a, f + 3 * f + cast - 2 * a};
}

void add_eager_f32_loss(SegmentWork& head, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp,
                        DType dtype) {
  const bool has_loss = std::any_of(head.forward.begin(), head.forward.end(),
                                    [](const OpWork& op) { return op.op == "cross_entropy"; });
  if (!has_loss) return;
  const double logits =
      static_cast<double>(micro_batch * seq) * static_cast<double>((config.vocab_size + tp - 1) / tp);
  const LossExtra extra = eager_f32_loss_extra(static_cast<double>(dtype_size(dtype)));
  head.forward.push_back({"eager_cross_entropy", "eager.loss", OpKind::Other, 0, logits * extra.forward});
  head.backward.push_back({"eager_cross_entropy_backward", "eager.loss.grad", OpKind::Other, 0, logits * extra.backward});
}

}  // namespace strata
