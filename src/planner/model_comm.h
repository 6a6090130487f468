#pragma once
// The communication one device does for one micro-batch, read from the graph
// the runtime runs: GPT-2 cut to two layers, split by tensor (and sequence)
// parallelism and cut into two pipeline parts by the runtime's own passes
// (parallel/parallelize.h), then differentiated. Every collective the
// tensor-parallel pass inserts and autodiff's conjugate of it, the
// vocabulary-parallel loss's combination and the stage boundary's transfers
// appear as their op schemas count them (OpSchema::comm), so the planner
// prices what the runtime does rather than a formula of it.
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/model_config.h"
#include "ops/schema.h"

namespace strata {

struct CommWork {
  std::string label;  // the node's
  CommPattern pattern = CommPattern::AllReduce;
  double bytes = 0;   // the buffer the pattern works on (OpSchema::comm)
  int ranks = 1;      // of the group
  DType dtype = DType::F32;
};

struct SegmentComm {
  std::vector<CommWork> forward;
  std::vector<CommWork> backward;
};

struct ModelComm {
  SegmentComm embedding;  // before the layers
  SegmentComm layer;      // one transformer block
  SegmentComm head;       // after them (final norm, LM head, loss)
  // The activation a stage boundary sends forward; its gradient goes back the same size.
  double boundary_bytes = 0;
};

// How the runtime enters the tensor-parallel region when several linears read one value (a Llama's q, k and v
// projections; its gate and up projections). PerLinear: each linear its own entry, as Strata's runtime does
// (an all-gather each under sequence parallelism, a backward all-reduce each without). Shared: one entry for
// all of them, as Megatron-LM's f/g operators before its fused QKV and fc1 GEMMs (Korthikanti et al. 2022,
// Fig. 5) and torchtitan's PrepareModuleInput on the attention and feed-forward blocks do: the forward call
// once, and backward the linears' partial input gradients summed on the device before one conjugate call.
enum class TensorParallelInput { PerLinear, Shared };

// What a tensor-parallel degree `tp` (with sequence parallelism when `sp`)
// makes one device send for a micro-batch of `micro_batch` rows of `seq`
// tokens in `dtype`, and what a stage boundary carries.
ModelComm model_comm(const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp, bool sp, DType dtype,
                     TensorParallelInput input = TensorParallelInput::PerLinear);

}  // namespace strata
