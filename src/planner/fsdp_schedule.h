#pragma once
// One micro-batch of a ZeRO-3 (fully sharded) stage as PyTorch's FSDP runs it,
// block by block: each transformer layer is a unit of its own whose parameters
// are all-gathered before it runs and freed after, and the rest of the stage
// (embedding, final norm, head) is the root unit, gathered once at the start of
// the forward pass and kept until the end of the backward pass (FSDP2 documents
// this for its root; FSDP1 does the same).
//
// Forward: the root's gather has nothing to hide behind; layer i's gather is
// prefetched while the unit before it computes, but only one ahead (at most two
// units are gathered at once: FSDP1's limit_all_gathers, FSDP2's implicit
// prefetch), so it cannot start before the unit two back has finished.
// Backward (layers in reverse, gathered again since they were freed after
// forward): layer i-1's gather is prefetched when layer i's backward starts,
// layer i's gradients are reduce-scattered when its backward ends, the root's
// at the very end. Gathers and reduce-scatters share the data-parallel network,
// so they run one after another on one link. Over n equal layers of compute c
// and gather g this gives the familiar first gather + (n - 1) max(c, g) + c.
namespace strata {

struct FsdpStage {
  int layers = 0;
  // Seconds of one layer on the compute stream (recomputation and tensor-parallel collectives included).
  double layer_forward = 0, layer_backward = 0;
  double layer_gather = 0, layer_reduce = 0;  // one layer's all-gather of weights and reduce-scatter of gradients
  // The root unit: what this stage holds of the embedding (before the layers) and the head (after them).
  double embedding_forward = 0, embedding_backward = 0;
  double head_forward = 0, head_backward = 0;
  double root_gather = 0, root_reduce = 0;
};

struct FsdpExposure {
  double exposed = 0;  // seconds the stage waits on the network beyond its compute
  double busy = 0;     // seconds the network runs, hidden or not
};

FsdpExposure fsdp_exposure(const FsdpStage& stage);

}  // namespace strata
