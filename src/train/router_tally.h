#pragma once
// A mixture-of-experts model's router figures over a step (record/metrics.h's RouterMetrics): read
// from each micro-batch's graph after it runs, combined over the step and the data-parallel ranks. Only
// the ranks running the model part with the loss have the router's values (under pipeline parallelism the
// last stage's last part: every layer's sums cross the stage boundaries to it); the others take its figures.
#include <cstdint>
#include <functional>
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
  // The micro-batches' values of `model`'s router (model/model_graph.h): of the part with the loss;
  // `routed` whether the model routes at all (a stage without the loss takes the figures; a dense
  // model's tally nothing).
  RouterTally(const ModelGraph& model, bool routed);
  explicit RouterTally(const ModelGraph& model) : RouterTally(model, model.router.balance >= 0) {}
  bool active() const { return router_.balance >= 0; }
  // What the graph must keep readable after a run (CompiledGraph's `kept`).
  std::vector<int> values() const;

  // One micro-batch's values, read from `graph`'s `slot` after it ran (in the micro-batches' order).
  void add(const CompiledGraph& graph, int slot = 0);
  // The figures of the ranks with the loss, given to every rank (the identity where every rank has it).
  using FromLossRanks = std::function<std::vector<double>(std::vector<double> figures)>;
  // The step's figures over the `micro_batches` of every rank (each rank with the loss having added
  // its share), on every rank; empties the tally for the next step. Nothing for a dense model.
  std::optional<RouterMetrics> finish(DataParallel& parallel, int64_t micro_batches, const FromLossRanks& from_loss_ranks);

 private:
  RouterMetrics tallied(DataParallel& parallel, int64_t micro_batches);

  bool routed_ = false;
  ModelGraph::RouterLosses router_;
  std::vector<double> aux_, z_;        // per micro-batch, in order
  std::vector<double> expert_tokens_;  // routed per expert, then the dropped count last
};

}  // namespace strata
