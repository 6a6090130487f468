#include "planner/loss_work.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace strata {

LossKernel parse_loss_kernel(const std::string& text, const std::string& what) {
  if (text == "fused") return LossKernel::Fused;
  if (text == "eager-f32") return LossKernel::EagerF32;
  if (text == "eager-f32-zloss") return LossKernel::EagerF32ZLoss;
  if (text == "triton-f32") return LossKernel::TritonF32;
  if (text == "megatron-f32") return LossKernel::MegatronF32;
  if (text == "megatron-f32-fused") return LossKernel::MegatronF32Fused;
  fail("{} must be fused, eager-f32, eager-f32-zloss, triton-f32, megatron-f32 or megatron-f32-fused, got '{}'",
       what, text);
}

LossExtra loss_extra(LossKernel loss, double a) {
  constexpr double f = 4;  // fp32
  const double cast = a == f ? 0 : a + f;  // float() and its backward copy only when the logits are narrower
  // What the fused kernel moves: the logits read forward; read and their gradient written backward.
  const double fused_forward = a, fused_backward = 2 * a;
  switch (loss) {
    case LossKernel::Fused:
      return {};
    case LossKernel::EagerF32:
      // Forward: float(), log_softmax 2f. Backward: nll_loss's zeroed gradient f, log_softmax's 3f, float()'s.
      return {cast + 2 * f - fused_forward, f + 3 * f + cast - fused_backward};
    case LossKernel::EagerF32ZLoss:
      // Forward: float(), the shifted copy 2f, log_softmax 2f, logsumexp 6f (amax f, subtract 2f, exp_ 2f, sum f).
      // Backward: logsumexp's 6f, nll_loss's f, log_softmax's 3f, the two gradients summed 3f, slice_backward's
      // zeroing f and copy 2f, float()'s.
      return {cast + 2 * f + 2 * f + 6 * f - fused_forward, 6 * f + f + 3 * f + 3 * f + 3 * f + cast - fused_backward};
    case LossKernel::TritonF32:
      // Forward: float(), the shifted copy 2f, the kernel's read f. Backward: the kernel's 2f, slice_backward's 3f,
      // float()'s.
      return {cast + 2 * f + f - fused_forward, 2 * f + 3 * f + cast - fused_backward};
    case LossKernel::MegatronF32:
      // Forward: float(), max f, sub_ 2f, exp_ 2f, sum f, div_ 2f. Backward: mul_ 2f, float()'s.
      return {cast + f + 2 * f + 2 * f + f + 2 * f - fused_forward, 2 * f + cast - fused_backward};
    case LossKernel::MegatronF32Fused: {
      // Forward: the logits read and their f copy written (fp32 logits are returned as they are), f read and
      // written twice. Backward: f read and written back, the gradient written in bf16 (calculate_gradients casts to
      // torch.bfloat16), which autograd casts to wider logits (read 2, written a).
      constexpr double bf16 = 2;
      const double first = a == f ? f : a + f;
      const double back_cast = a == bf16 ? 0 : bf16 + a;
      return {first + 2 * f + 2 * f - fused_forward, 2 * f + bf16 + back_cast - fused_backward};
    }
  }
  return {};
}

void add_loss_work(SegmentWork& head, LossKernel loss, const ModelConfig& config, int64_t micro_batch, int64_t seq,
                   int tp, DType dtype) {
  if (loss == LossKernel::Fused) return;
  const bool has_loss = std::any_of(head.forward.begin(), head.forward.end(),
                                    [](const OpWork& op) { return op.op == "cross_entropy"; });
  if (!has_loss) return;
  const double logits =
      static_cast<double>(micro_batch * seq) * static_cast<double>((config.vocab_size + tp - 1) / tp);
  const LossExtra extra = loss_extra(loss, static_cast<double>(dtype_size(dtype)));
  head.forward.push_back({"eager_cross_entropy", "eager.loss", OpKind::Other, 0, logits * extra.forward});
  head.backward.push_back({"eager_cross_entropy_backward", "eager.loss.grad", OpKind::Other, 0, logits * extra.backward});
}

}  // namespace strata
