#include "planner/complex_rope_work.h"

namespace strata {

namespace {
constexpr double kF32 = 4;  // x.float() and the complex64 product: fp32 between the casts
}  // namespace

EagerExtra complex_rope_extra(double a) {
  const double f = kF32;
  // Forward: float() a+f, the eager complex product f+f, type_as f+a; backward: type_as's gradient a+f, the product
  // with conj(freqs) f+f, float()'s gradient f+a. The fused kernel reads and writes each element once each way.
  const double forward = (a + f) + (f + f) + (f + a);
  const double backward = (a + f) + (f + f) + (f + a);
  return {forward - 2 * a, backward - 2 * a};
}

void add_complex_rope(SegmentWork& layer, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp,
                      DType dtype) {
  const OpWork* fused = first_op_named(layer.forward, "rope");
  if (fused == nullptr) return;
  const double elements = static_cast<double>(micro_batch * seq) *
                          static_cast<double>((config.n_head + config.kv_heads()) / tp * config.head_size());
  const EagerExtra bytes = complex_rope_extra(static_cast<double>(dtype_size(dtype)));
  OpWork forward{"complex_rope", "self_attn.complex_rope", OpKind::Other, 0, elements * bytes.forward};
  forward.residual_stream = fused->residual_stream;
  forward.selective_recompute = fused->selective_recompute;
  OpWork backward{"complex_rope_backward", "self_attn.complex_rope.grad", OpKind::Other, 0,
                  elements * bytes.backward};
  backward.residual_stream = fused->residual_stream;
  layer.forward.push_back(forward);
  layer.backward.push_back(backward);
}

}  // namespace strata
