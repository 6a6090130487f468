#pragma once
// Shared by the recomputation and in-place planning tests: a small GPT-2
// training graph and ways to run it that yield the loss and every gradient as
// raw bytes, for bit-for-bit comparisons.
#include <set>
#include <string>
#include <vector>

#include "graph/memory_plan.h"
#include "graph/rewrite.h"
#include "model/model_graph.h"

namespace strata::training_run {

// Three layers, width 32, 2 heads, vocabulary 37; batch 2 of 12 tokens.
ModelConfig three_layer_config();
ModelGraph three_layer_training_graph();

// The node where autodiff began: the first one reading the loss seed.
int first_backward_node(const ModelGraph& model);

// Loss and gradients (in model.params order) of one training step.
struct StepBytes {
  std::vector<std::byte> loss;
  std::vector<std::vector<std::byte>> grads;
};

// Runs `graph`, whose values map from model's through `map`, with the
// executor (arena from the memory planner) on `backend`.
StepBytes run_compiled(const ModelGraph& model, const Graph& graph, const GraphRewriter::Result& map,
                       const std::string& backend);
// Runs model's graph with every value in a buffer of its own (no planner).
StepBytes run_unplanned(const ModelGraph& model, const std::string& backend);

// The loss and gradients the executor keeps.
std::set<int> kept_values(const ModelGraph& model);

}  // namespace strata::training_run
