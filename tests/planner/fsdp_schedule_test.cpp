// ZeRO-3 unit by unit as FSDP runs it (fsdp_schedule.h), against the closed forms of a pass over
// n equal units with one-ahead prefetch: first gather + (n - 1) max(compute, gather) + compute, and
// a backward pass that the network bounds by the sum of its collectives.
#include <gtest/gtest.h>

#include "planner/fsdp_schedule.h"

namespace strata {
namespace {

// When every layer computes longer than its collectives take, only the start and the end show:
// the root's gather and the first layer's (less what the embedding's forward hides of it), and the
// first layer's reduce-scatter (less the embedding's backward) followed by the root's.
TEST(PlannerFsdp, ComputeBoundStepExposesOnlyTheFirstGathersAndTheLastReduceScatters) {
  FsdpStage s;
  s.layers = 4;
  s.layer_forward = 10, s.layer_backward = 20, s.layer_gather = 3, s.layer_reduce = 5;
  s.embedding_forward = 1, s.embedding_backward = 1, s.head_forward = 1, s.head_backward = 4;
  s.root_gather = 2, s.root_reduce = 4;
  const FsdpExposure e = fsdp_exposure(s);
  const double expected = s.root_gather + (s.layer_gather - s.embedding_forward) +
                          (s.layer_reduce - s.embedding_backward) + s.root_reduce;
  EXPECT_DOUBLE_EQ(e.exposed, expected);
  // Every layer is gathered twice (forward, then again for backward) and reduce-scattered once.
  EXPECT_DOUBLE_EQ(e.busy, s.root_gather + s.root_reduce + s.layers * (2 * s.layer_gather + s.layer_reduce));
}

// When gathers take longer than a layer's forward, each forward unit waits for its gather (prefetch
// is one unit ahead); when gather + reduce-scatter take longer than a layer's backward, the network
// runs without a gap through the backward pass.
TEST(PlannerFsdp, NetworkBoundPassesTakeTheirCollectivesTime) {
  FsdpStage s;
  s.layers = 3;
  s.layer_forward = 1, s.layer_backward = 2, s.layer_gather = 4, s.layer_reduce = 3;
  s.head_backward = 1;
  const FsdpExposure e = fsdp_exposure(s);
  const double n = s.layers;
  const double forward = s.layer_gather + (n - 1) * s.layer_gather + s.layer_forward;
  const double backward = n * (s.layer_gather + s.layer_reduce);
  const double compute = n * (s.layer_forward + s.layer_backward) + s.head_backward;
  EXPECT_DOUBLE_EQ(e.exposed, forward + backward - compute);
}

// With the collectives free nothing is exposed, and a stage holding only the root unit (one layer-less
// pipeline end, say) exposes its gather and its reduce-scatter whole.
TEST(PlannerFsdp, FreeCollectivesExposeNothingAndARootAloneExposesBoth) {
  FsdpStage s;
  s.layers = 2;
  s.layer_forward = 1, s.layer_backward = 2, s.embedding_forward = 1, s.head_backward = 1;
  EXPECT_DOUBLE_EQ(fsdp_exposure(s).exposed, 0.0);
  FsdpStage root;
  root.head_forward = 5, root.head_backward = 5, root.root_gather = 2, root.root_reduce = 3;
  EXPECT_DOUBLE_EQ(fsdp_exposure(root).exposed, 5.0);
}

}  // namespace
}  // namespace strata
