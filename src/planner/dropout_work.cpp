#include "planner/dropout_work.h"

namespace strata {

namespace {

constexpr double kMaskBytes = 1;  // torch keeps dropout masks as bool

OpWork dropout_op(const std::string& label, double elements, double bytes_per_element, bool residual_stream,
                  bool recomputed) {
  OpWork op{"dropout", label, OpKind::Other, elements, elements * bytes_per_element};
  op.residual_stream = residual_stream;
  op.selective_recompute = recomputed;
  return op;
}

}  // namespace

void add_dropout(SegmentWork& layer, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp, DType dtype,
                 bool unfused_attention, SelectivePolicy selective) {
  const double width = static_cast<double>(dtype_size(dtype));
  const double branch = static_cast<double>(micro_batch * seq * config.n_embd);
  // Megatron's selective recomputation keeps the residual branches; torchtitan's redoes every element-wise op.
  const bool branch_redone = selective == SelectivePolicy::AlternateGemms;
  for (const char* label : {"attention.residual_dropout", "mlp.residual_dropout"}) {
    layer.forward.push_back(dropout_op(label, branch, kMaskBytes, true, branch_redone));
    layer.backward.push_back(dropout_op(std::string(label) + ".grad", branch, 2 * width + kMaskBytes, true, false));
  }
  const double masks = 2 * branch * kMaskBytes;
  layer.saved[static_cast<size_t>(RecomputeMode::None)].residual += masks;
  if (!branch_redone) layer.saved[static_cast<size_t>(RecomputeMode::Selective)].residual += masks;
  if (!unfused_attention) return;

  const double probabilities = static_cast<double>(micro_batch * (config.n_head / tp) * seq * seq);
  layer.forward.push_back(dropout_op("attention.dropout", probabilities, 2 * width + kMaskBytes, false, true));
  layer.backward.push_back(dropout_op("attention.dropout.grad", probabilities, 2 * width + kMaskBytes, false, false));
  layer.saved[static_cast<size_t>(RecomputeMode::None)].sharded += probabilities * (width + kMaskBytes);
}

}  // namespace strata
