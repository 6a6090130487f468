#include "planner/final_norm_work.h"

#include "core/error.h"

namespace strata {

namespace {

constexpr double kF32 = 4;  // OLMo-core's RMSNorm computes in fp32 between its casts (full_precision)

}  // namespace

FinalNormExtra olmo_eager_rms_norm_extra(double a) {
  const double f = kF32;
  const double forward = (a + f) + (f + f) + f + (f + f) + (f + f) + (f + a);
  const double backward = (a + f) + 2 * f + (3 * f + f) + 2 * f + (3 * f + f) + f + 7 * f + 3 * f + (f + a);
  return {forward - 2 * a, backward - 3 * a};
}

void add_final_norm_work(SegmentWork& head, FinalNorm norm, const ModelConfig& config, int64_t micro_batch,
                         int64_t seq, DType dtype) {
  if (norm == FinalNorm::Fused) return;
  const OpWork* fused = first_op_named(head.forward, "rms_norm");
  if (fused == nullptr) {
    fail("--final-norm olmo-eager prices OLMo-core's eager RMSNorm, but the {} family's head has no RMSNorm",
         config.family);
  }
  const double elements = static_cast<double>(micro_batch * seq) * static_cast<double>(config.n_embd);
  const FinalNormExtra extra = olmo_eager_rms_norm_extra(static_cast<double>(dtype_size(dtype)));
  OpWork forward{"eager_final_norm", "norm.eager", OpKind::Other, 0, elements * extra.forward};
  OpWork backward{"eager_final_norm_backward", "norm.eager.grad", OpKind::Other, 0, elements * extra.backward};
  forward.residual_stream = backward.residual_stream = fused->residual_stream;
  head.forward.push_back(forward);
  head.backward.push_back(backward);
}

}  // namespace strata
