#pragma once
// What one device computes for one micro-batch: the ops of a transformer
// layer, of the embedding and of the LM head as Strata's graph runs them,
// with tensor-parallel shapes (Megatron's split: c_attn and c_fc by output
// columns, the projections by input rows, attention by heads, the tied
// embedding and LM head by vocabulary rows). Each segment is built as its own
// per-device graph with the model's ops and differentiated by the graph's
// autodiff, so FLOPs and bytes come from the op schemas and the saved
// activations from the graph itself.
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "graph/graph.h"
#include "graph/recompute.h"
#include "model/model_config.h"

namespace strata {

// A GEMM-kind op as the matrix engine sees it: `batch` products of [m, k] by [k, n].
struct GemmShape {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

// An attention-kind op: independent (batch row, head) problems of `seq` query
// rows each, run as `ring_steps` kernels of equal work (context parallelism:
// one per block of keys and values passed around the ring; the op's FLOPs and
// bytes are all the steps').
struct AttentionShape {
  int64_t problems = 0;
  int64_t seq = 0;
  int64_t head_dim = 0;
  bool backward = false;
  int64_t ring_steps = 1;
};

// Which forward ops of a layer selective recomputation redoes in backward.
enum class SelectivePolicy {
  AttentionCore,   // the ops whose schema says recomputed_selectively (Megatron's policy; Strata's trainer)
  AlternateGemms,  // torchtitan's per-op policy: keep attention's outputs and those of the layer's 1st, 3rd, ...
                   // GEMM, redo every other op
};
SelectivePolicy parse_selective_policy(std::string_view text, std::string_view key);  // errors name `key`

struct OpWork {
  std::string op;
  std::string label;
  OpKind kind = OpKind::Other;  // from the op's schema
  double flops = 0;
  double bytes = 0;
  GemmShape gemm;            // kind Gemm only
  AttentionShape attention;  // kind Attention only
  // Works on the residual stream, which tensor parallelism replicates and
  // sequence parallelism splits by sequence.
  bool residual_stream = false;
  // A forward op redone in backward under selective recomputation (by the workload's SelectivePolicy).
  bool selective_recompute = false;
  // A linear's GEMM run on the device's float8 engine (fp8_linears.h); its bytes are then the fp8 operands'.
  bool fp8 = false;
  // Kind Gemm: the graph's id of the value its first operand reads (a linear's input), -1 if unknown; GEMMs
  // reading one value share its float8 cast (fp8_linears.h).
  int gemm_input = -1;
};

// One node of any graph as the cost model sees it (no stream or recomputation flags).
OpWork op_work(const Graph& graph, int node_id);

// The first of `ops` running the op `name` (its schema's name, e.g. "rms_norm"); null when none does.
const OpWork* first_op_named(const std::vector<OpWork>& ops, const std::string& name);

// Bytes of activations: the part on the residual stream (divided by the
// tensor-parallel degree under sequence parallelism), the part already
// split by tensor parallelism, and a mixture of experts' rows between the
// token permutation and the experts' last GEMM, which expert parallelism
// multiplies: the runtime sizes the rows a rank receives for ep ranks' worth
// (every rank's rows could go to its experts).
struct ActivationBytes {
  double residual = 0;
  double sharded = 0;
  double expert_rows = 0;
  double total(int sequence_split, int expert_parallel = 1) const {
    return residual / sequence_split + sharded + expert_rows * expert_parallel;
  }
};

struct SegmentWork {
  std::vector<OpWork> forward;
  std::vector<OpWork> backward;
  double params = 0;  // parameters one device holds for this segment
  double expert_params = 0;  // of those, the ones stacked over the experts (all of them; ep splits them)
  // Kept from forward to backward, per recomputation mode (index: RecomputeMode).
  std::array<ActivationBytes, 3> saved{};
  // Live at once when the segment runs alone (the memory planner's peak plus
  // its activation inputs): saved activations plus backward temporaries.
  ActivationBytes peak;
};

struct Workload {
  int64_t micro_batch = 0;
  int64_t seq = 0;
  int tp = 1;
  DType dtype = DType::F32;
  SegmentWork embedding;  // token and position embeddings
  SegmentWork layer;      // one transformer block
  SegmentWork head;       // final LayerNorm, tied LM head, cross-entropy
  // Summing the two gradients of the tied embedding when one device holds both ends (none: untied).
  OpWork tied_gradient_sum;
  // Bytes live during that sum beyond the summed gradient: both partial
  // gradients, less the one the sum takes over in place.
  double tied_gradient_sum_extra = 0;
};

// Per-device work of `config` at `micro_batch` rows of `seq` tokens under
// tensor parallelism `tp`, which must divide the heads; a vocabulary shard
// holds ceil(vocab_size / tp) rows.
Workload build_workload(const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp, DType dtype,
                        SelectivePolicy selective = SelectivePolicy::AttentionCore);

// A workload built at a device's seq / `parts` positions of a sequence split by context parallelism,
// made what that device runs: its causal attention reads every part's keys and values, so each
// attention op (forward and backward) runs `parts` ring steps. With the causal mask balanced over
// the parts (two chunks per rank, i and 2·parts−1−i, as Megatron-Core and Transformer Engine split
// it), every step does the work of the local causal block: (s/parts)²/2 scores, as many as the
// diagonal step's and half of an unmasked block's (the lower triangle of s²/2 is parts² such blocks
// shared by `parts` ranks). The op's FLOPs and bytes become `parts` times the block's.
void run_attention_over_ring(Workload& work, int parts);

}  // namespace strata
