#pragma once
// The merging of context parallelism's ring steps (`strata plan --cp-merge te|torch`): each step's attention over one
// block of keys and values gives a partial output and log-sum-exp that the runtime folds into the layer's result,
// and backward a partial dQ, dK and dV it adds into accumulators, in element-wise kernels of their own beside the
// attention blocks (context_parallel_exchange.h prices the transfers, workload.h's run_attention_over_ring the
// blocks). Priced as their memory traffic per layer and micro-batch, for the busiest rank: the last of the cp group,
// whose every step takes all its queries (the others take half of them in some steps). With O the elements of the
// attention output a rank holds, K those of its keys (as many in its values), cp steps, a bytes per element of the
// compute dtype and f = 4 (fp32):
//
// te, Transformer Engine's AttnFuncWithCPAndKVP2P without fp8 (transformer_engine/pytorch/attention.py at
// NVIDIA/TransformerEngine v1.10, as Megatron-Core runs it), K the key/value heads':
// - forward: the keys and values concatenated into the first send buffer (torch.cat, 2K read and written), the
//   output zeroed (O written), and every step's output added in place after its correction
//   (flash_attn_fwd_out_correction: out.add_(out_per_step * exp(lse_step - lse)): out read and written, the step's
//   read, 3aO);
// - backward: the keys and values copied into the first send buffer (2K read and written); every step's dQ added
//   into dq (3aO), its dK and dV concatenated (torch.cat, the fused-attention path: 2K read and written) and added into
//   the received dK/dV buffer (3a·2K).
//
// torch, PyTorch's _templated_ring_attention and _templated_ring_attention_backward with convert_to_f32 (the
// default; torch/distributed/tensor/experimental/_attention.py, _SDPAMerger and _partial_update), as torchtitan
// runs it, K all the query heads' (torchtitan's Llama repeats the key/value heads before SDPA):
// - forward: every step's output cast to fp32 (aO read, fO written); from the second step on, the merge out -
//   sigmoid(lse_step - lse) * (out - out_step) in three fp32 kernels (subtract 3fO, multiply 2fO, subtract 3fO) and
//   the keys and values concatenated before each exchange (2K read and written); the result cast back (fO read, aO
//   written);
// - backward: the fp32 accumulators of dQ, dK, dV zeroed (f(O + 2K) written); every step's dQ added into the fp32 one
//   ((2f + a)O); the first step's dK and dV added whole ((2f + a)·2K), every later one's into the first of the two
//   chunks of its rank ((2f + a)K/2 each) and the accumulator rebuilt by torch.cat (2fK each); the fp32 dK/dV
//   concatenated for each exchange (4fK); the keys and values concatenated before each exchange but the last
//   (2K read and written); the results cast back ((f + a)O and (f + a)·2K).
//
// torch-compiled, the same inside a block torch.compile traces whole (torchtitan compiles each TransformerBlock with
// fullgraph=True, so the ring attention and its backward are traced into the block's graphs and Inductor fuses each
// step's element-wise work into one kernel that reads its inputs once and writes what it returns once):
// - forward: the first step's output cast to fp32 ((a + f)O); every later step's merge one pass (the fp32 output
//   and the step's read, the fp32 output written: (2f + a)O); the keys and values concatenated before each exchange
//   (a collective's input, written: 2K read and written); the result cast back ((f + a)O);
// - backward: the first step's dQ cast into the fp32 accumulator ((a + f)O), every later one added ((2f + a)O);
//   every step's dK and dV added into the fp32 buffer the exchange sends, written there directly ((2f + a)·2K);
//   the keys and values concatenated before each exchange but the last; the results cast back.
// Launches are the planner's per-op cost, once per merge op; the fp32 accumulators' memory is not in the activations.
#include <string>

#include "core/dtype.h"
#include "model/model_config.h"
#include "planner/workload.h"

namespace strata {

enum class RingMerge {
  None,               // not priced (Strata's runtime does not run context parallelism)
  TransformerEngine,  // Transformer Engine's P2P ring, as Megatron-Core runs it
  Torch,              // PyTorch's context_parallel, as torchtitan runs it, eager
  TorchCompiled,      // the same traced by torch.compile, each step's element-wise work one kernel
};
RingMerge parse_ring_merge(const std::string& text, const std::string& what);  // none | te | torch | torch-compiled

struct RingMergeBytes {
  double forward = 0;
  double backward = 0;
};

// Bytes the busiest rank's merging moves in one layer and micro-batch: `out` elements of attention output, `kv` of
// keys (as many of values), `steps` ring steps, `element_bytes` per element of the compute dtype.
RingMergeBytes ring_merge_bytes(RingMerge merge, int steps, double out, double kv, double element_bytes);

// Adds that traffic to a layer whose attention runs over `steps` ring steps (one memory-bound op each way); nothing
// for RingMerge::None or a single step.
void add_ring_merge(SegmentWork& layer, RingMerge merge, const ModelConfig& config, int steps, DType dtype);

}  // namespace strata
