#include "graph/recompute.h"

#include <gtest/gtest.h>

#include <set>

#include "gpt2_training_run.h"
#include "graph/memory_plan.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

using training_run::first_backward_node;
using training_run::three_layer_training_graph;

const SegmentOf kLayers = segment_by_label_prefix("transformer.h.");

bool is_clone(const Node& node) { return node.label.ends_with(".recompute"); }

GraphRewriter::Result rewrite(const ModelGraph& model, RecomputeMode mode) {
  return recompute_activations(model.graph, first_backward_node(model), mode, kLayers);
}

// Forward originals (made before `first_backward`) that nodes from
// `first_backward` on read.
std::set<int> forward_values_read_later(const Graph& graph, int first_backward) {
  std::set<int> read;
  for (int id = first_backward; id < graph.num_nodes(); ++id) {
    for (int input : graph.node(id).inputs) {
      int producer = graph.value(input).producer;
      if (producer >= 0 && producer < first_backward) read.insert(input);
    }
  }
  return read;
}

TEST(Recompute, ModesParseAndErrorsNameTheKey) {
  EXPECT_EQ(parse_recompute_mode("none", "k"), RecomputeMode::None);
  EXPECT_EQ(parse_recompute_mode("selective", "k"), RecomputeMode::Selective);
  EXPECT_EQ(parse_recompute_mode("full", "k"), RecomputeMode::Full);
  EXPECT_EQ(recompute_mode_name(RecomputeMode::Full), "full");
  try {
    parse_recompute_mode("some", "train.recompute");
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("train.recompute"), std::string::npos);
  }
}

TEST(Recompute, SegmentsComeFromLabelPrefixes) {
  auto segment = [](const std::string& label) { return kLayers(Node{"add", {}, {}, {}, label}); };
  EXPECT_EQ(segment("transformer.h.3.attn"), 3);
  EXPECT_EQ(segment("transformer.h.12.mlp.c_fc.grad_w"), 12);
  EXPECT_EQ(segment("transformer.h.7"), 7);
  EXPECT_EQ(segment("transformer.h.3x.attn"), -1);
  EXPECT_EQ(segment("transformer.h..attn"), -1);
  EXPECT_EQ(segment("transformer.ln_f"), -1);
  EXPECT_EQ(segment(""), -1);
}

TEST(Recompute, NoneCopiesTheGraph) {
  ModelGraph model = three_layer_training_graph();
  GraphRewriter::Result result = rewrite(model, RecomputeMode::None);
  ASSERT_EQ(result.graph.num_nodes(), model.graph.num_nodes());
  for (int id = 0; id < model.graph.num_nodes(); ++id) {
    const Node& before = model.graph.node(id);
    const Node& after = result.graph.node(id);
    EXPECT_EQ(after.op, before.op);
    EXPECT_EQ(after.label, before.label);
    for (size_t i = 0; i < before.inputs.size(); ++i) EXPECT_EQ(after.inputs[i], result(before.inputs[i]));
  }
}

TEST(Recompute, SelectiveReRunsAttentionJustBeforeItsFirstBackwardUse) {
  ModelGraph model = three_layer_training_graph();
  int first_backward = first_backward_node(model);
  GraphRewriter::Result result = rewrite(model, RecomputeMode::Selective);
  const Graph& g = result.graph;
  int clones = 0;
  for (int id = first_backward; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    if (is_clone(node)) {
      ++clones;
      EXPECT_EQ(node.op, "attention");
      // The very next node reads it: clones are emitted lazily.
      const std::vector<int>& next = g.node(id + 1).inputs;
      EXPECT_TRUE(std::find(next.begin(), next.end(), node.outputs[0]) != next.end()) << node.label;
    }
  }
  EXPECT_EQ(clones, 3);
  for (int value : forward_values_read_later(g, first_backward)) {
    EXPECT_NE(g.node(g.value(value).producer).op, "attention") << g.value(value).name;
  }
  EXPECT_EQ(g.num_nodes(), model.graph.num_nodes() + 3);
}

TEST(Recompute, FullKeepsOnlyWhatEntersEachLayer) {
  ModelGraph model = three_layer_training_graph();
  int first_backward = first_backward_node(model);
  GraphRewriter::Result result = rewrite(model, RecomputeMode::Full);
  const Graph& g = result.graph;
  for (int value : forward_values_read_later(g, first_backward)) {
    const std::string& label = g.node(g.value(value).producer).label;
    if (kLayers(g.node(g.value(value).producer)) < 0) continue;  // outside the layers: not recomputed
    // Inside a layer only its output, the next layer's input, survives.
    EXPECT_TRUE(label.ends_with(".mlp.residual")) << g.value(value).name;
  }
  // What the layer's backward reads is re-run once per layer; the output
  // projections, whose results no backward node reads, are not.
  std::multiset<std::string> clones;
  for (const Node& node : g.nodes()) {
    if (is_clone(node)) clones.insert(node.label);
  }
  for (int layer = 0; layer < 3; ++layer) {
    std::string p = "transformer.h." + std::to_string(layer) + ".";
    for (std::string part : {"ln_1", "attn.c_attn", "attn", "attn.c_proj", "attn.residual", "ln_2", "mlp.c_fc",
                             "mlp.gelu"}) {
      EXPECT_EQ(clones.count(p + part + ".recompute"), 1u) << p + part;
    }
  }
  EXPECT_EQ(clones.size(), 3u * 8u);
  EXPECT_EQ(g.num_nodes(), model.graph.num_nodes() + static_cast<int>(clones.size()));
}

TEST(Recompute, LossAndGradientsAreBitIdentical) {
  ModelGraph model = three_layer_training_graph();
  for (const std::string backend : {"cpu", "ref"}) {
    GraphRewriter::Result none = rewrite(model, RecomputeMode::None);
    training_run::StepBytes expected = training_run::run_compiled(model, none.graph, none, backend);
    for (RecomputeMode mode : {RecomputeMode::Selective, RecomputeMode::Full}) {
      GraphRewriter::Result result = rewrite(model, mode);
      training_run::StepBytes got = training_run::run_compiled(model, result.graph, result, backend);
      std::string what = backend + " " + std::string(recompute_mode_name(mode));
      EXPECT_EQ(got.loss, expected.loss) << what;
      for (size_t i = 0; i < model.params.size(); ++i) {
        EXPECT_EQ(got.grads[i], expected.grads[i]) << what << " " << model.graph.value(model.params[i]).name;
      }
    }
  }
}

// The shapes of configs/bench/small.toml: 6 layers, width 384, vocabulary
// 4096, 256 tokens, batch 8. Planning only: nothing is allocated.
TEST(Recompute, PlannedPeakDropsFromNoneToSelectiveToFull) {
  ModelConfig config = testing::gpt2_config(6, 6, 384, 4096, 256);
  ModelGraph model = build_model_graph(config, 8, 256, /*training=*/true);
  for (bool in_place : {false, true}) {
    std::vector<size_t> peaks;
    for (RecomputeMode mode : {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full}) {
      GraphRewriter::Result result = rewrite(model, mode);
      std::set<int> kept;
      for (int value : training_run::kept_values(model)) kept.insert(result(value));
      peaks.push_back(plan_memory(result.graph, kept, {.in_place = in_place}).arena_bytes);
      std::printf("recompute %-9s in_place %d: arena %.1f MiB\n", std::string(recompute_mode_name(mode)).c_str(),
                  in_place, static_cast<double>(peaks.back()) / (1 << 20));
    }
    EXPECT_GT(peaks[0], peaks[1]) << "in_place " << in_place;
    EXPECT_GT(peaks[1], peaks[2]) << "in_place " << in_place;
  }
}

}  // namespace
}  // namespace strata
