#include "planner/ring_merge_work.h"

#include "core/error.h"

namespace strata {

RingMerge parse_ring_merge(const std::string& text, const std::string& what) {
  if (text == "none") return RingMerge::None;
  if (text == "te") return RingMerge::TransformerEngine;
  if (text == "torch") return RingMerge::Torch;
  if (text == "torch-compiled") return RingMerge::TorchCompiled;
  fail("{} must be none, te, torch or torch-compiled, got '{}'", what, text);
}

RingMergeBytes ring_merge_bytes(RingMerge merge, int steps, double out, double kv, double a) {
  constexpr double f = 4;  // fp32
  const double c = steps;
  switch (merge) {
    case RingMerge::None:
      return {};
    case RingMerge::TransformerEngine:
      return {4 * a * kv + a * out + c * 3 * a * out, 4 * a * kv + c * (3 * a * out + 4 * a * kv + 6 * a * kv)};
    case RingMerge::Torch: {
      const double forward = c * (a + f) * out + (c - 1) * 8 * f * out + (c - 1) * 4 * a * kv + (f + a) * out;
      const double first_step = 2 * (2 * f + a) * kv;
      const double later_step = 2 * ((2 * f + a) * kv / 2 + 2 * f * kv);
      const double backward = f * (out + 2 * kv) + c * (2 * f + a) * out + first_step + (c - 1) * later_step +
                              c * 4 * f * kv + (c - 1) * 4 * a * kv + (f + a) * out + 2 * (f + a) * kv;
      return {forward, backward};
    }
    case RingMerge::TorchCompiled: {
      const double casts = (a + f) * out + (f + a) * out;  // the first step's into fp32, the result's back
      const double exchanges = (c - 1) * 4 * a * kv;     // cat(k, v) before each exchange
      const double forward = casts + (c - 1) * (2 * f + a) * out + exchanges;
      const double backward =
          casts + (c - 1) * (2 * f + a) * out + c * (2 * f + a) * 2 * kv + exchanges + 2 * (f + a) * kv;
      return {forward, backward};
    }
  }
  return {};
}

void add_ring_merge(SegmentWork& layer, RingMerge merge, const ModelConfig& config, int steps, DType dtype) {
  if (merge == RingMerge::None || steps < 2) return;
  const OpWork* attention = nullptr;
  for (const OpWork& op : layer.forward) {
    if (op.kind == OpKind::Attention) attention = &op;
  }
  if (attention == nullptr) return;
  const AttentionShape& shape = attention->attention;
  const double out = static_cast<double>(shape.problems) * static_cast<double>(shape.seq) *
                     static_cast<double>(shape.head_dim);
  // Transformer Engine exchanges the key/value heads; torchtitan's Llama hands SDPA every query head's.
  const double kv = merge == RingMerge::TransformerEngine
                        ? out * static_cast<double>(config.kv_heads()) / static_cast<double>(config.n_head)
                        : out;
  const RingMergeBytes bytes = ring_merge_bytes(merge, steps, out, kv, static_cast<double>(dtype_size(dtype)));
  layer.forward.push_back({"cp_ring_merge", "cp.merge", OpKind::Other, 0, bytes.forward});
  layer.backward.push_back({"cp_ring_merge_backward", "cp.merge.grad", OpKind::Other, 0, bytes.backward});
}

}  // namespace strata
