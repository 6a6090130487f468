#pragma once
// A mixture-of-experts model's router figures over a step (record/metrics.h's RouterMetrics): read
// from each micro-batch's graph after it runs, combined over the step and the data-parallel ranks.
#include <cstdint>
#include <optional>
#include <vector>

#include "graph/executor.h"
#include "model/model_graph.h"
#include "parallel/data_parallel.h"
#include "record/metrics.h"

namespace strata {

class RouterTally {
 public:
  RouterTally() = default;  // tallies nothing
  // The micro-batches' values of `model`'s router (model/model_graph.h); a dense model's tally nothing.
  explicit RouterTally(const ModelGraph& model);
  bool active() const { return router_.balance >= 0; }
  // What the graph must keep readable after a run (CompiledGraph's `kept`).
  std::vector<int> values() const;

  // One micro-batch's values, read from `graph` after it ran.
  void add(const CompiledGraph& graph);
  // The step's figures over the `micro_batches` of every rank (each rank having added its share);
  // empties the tally for the next step. Nothing for a dense model.
  std::optional<RouterMetrics> finish(DataParallel& parallel, int64_t micro_batches);

 private:
  ModelGraph::RouterLosses router_;
  std::vector<double> aux_, z_;        // per micro-batch, in order
  std::vector<double> expert_tokens_;  // routed per expert, then the dropped count last
};

}  // namespace strata
