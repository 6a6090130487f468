#include "planner/kv_repeat_work.h"

namespace strata {

double kv_repeat_bytes(double rows, double q_width, double kv_width, double activation_bytes, bool eager) {
  if (kv_width >= q_width) return 0;
  // Eager: each of k and v copied (kv_width read, q_width written); backward each gradient summed over its group.
  if (eager) return rows * 2 * (kv_width + q_width) * activation_bytes;
  // Compiled: k's extra (q_width - kv_width) written by the kernel producing k, v's copy kv_width read + q_width
  // written; backward the mirror image (k's group sum inside that kernel's backward, v's reduction).
  return rows * ((q_width - kv_width) + (kv_width + q_width)) * activation_bytes;
}

void add_kv_repeat(SegmentWork& layer, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp,
                   DType dtype, bool eager) {
  const double head = static_cast<double>(config.head_size());
  const double q_width = static_cast<double>(config.n_head / tp) * head;
  const double kv_width = static_cast<double>(config.kv_heads() / tp) * head;
  const double bytes = kv_repeat_bytes(static_cast<double>(micro_batch * seq), q_width, kv_width,
                                       static_cast<double>(dtype_size(dtype)), eager);
  if (bytes == 0) return;
  OpWork forward{"kv_repeat", "self_attn.kv_repeat", OpKind::Other, 0, bytes};
  OpWork backward{"kv_repeat_backward", "self_attn.kv_repeat.grad", OpKind::Other, 0, bytes};
  // Split by heads, not on the residual stream; redone when the rotary embedding before it or the attention after
  // it is (it is neither a GEMM nor attention, which are all torchtitan's per-op policy keeps).
  for (const char* neighbour : {"rope", "grouped_attention"}) {
    const OpWork* op = first_op_named(layer.forward, neighbour);
    if (op != nullptr && op->selective_recompute) forward.selective_recompute = true;
  }
  layer.forward.push_back(forward);
  layer.backward.push_back(backward);
}

}  // namespace strata
