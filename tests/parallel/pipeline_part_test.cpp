// The pipeline cut on one process: GPT-2's parts chained through their stage-boundary ops (every
// part's forward in model order, then every backward in reverse, over a loopback "pp" group that
// hands each flow's sends to its receives in order) give the whole model's loss and every
// parameter's gradient bit for bit (the tied embedding's two copies summed), for 2, 3 and 4 parts
// of 4 layers, even and not (the planner's splits may be uneven), fused and not; and a mixture of
// experts' parts, whose boundaries also carry the router's running sums, likewise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>

#include <fmt/ranges.h>

#include "backends/backends.h"
#include "core/rng.h"
#include "graph/executor.h"
#include "ops/collective_group.h"
#include "model/family.h"
#include "parallel/parallelize.h"
#include "support/gpt2_shapes.h"
#include "support/llama_shapes.h"
#include "support/random_tokens.h"

namespace strata {
namespace {

// Every stage in one process, run one after another: a flow's receive takes its oldest send.
class LoopbackStages final : public CollectiveGroup {
 public:
  explicit LoopbackStages(int stages) : stages_(stages) {}
  int size() const override { return stages_; }
  int rank() const override { return 0; }
  void all_reduce_sum(void*, size_t, DType) override { FAIL() << "no collectives between stages"; }
  void all_gather_bytes(const void*, void*, size_t) override { FAIL() << "no collectives between stages"; }
  void reduce_scatter_sum(const void*, void*, size_t, DType) override { FAIL() << "no collectives between stages"; }
  void all_to_all_bytes(const void*, void*, size_t) override { FAIL() << "no collectives between stages"; }
  void all_to_all_v_bytes(const void*, std::span<const size_t>, void*, std::span<const size_t>) override {
    FAIL() << "no collectives between stages";
  }
  void send_bytes(const void* data, size_t bytes, int peer, StageFlow flow) override {
    ASSERT_TRUE(peer >= 0 && peer < stages_) << "send to stage " << peer;
    const char* from = static_cast<const char*>(data);
    queued_[static_cast<size_t>(flow)].emplace_back(from, from + bytes);
  }
  void receive_bytes(void* data, size_t bytes, int, StageFlow flow) override {
    std::deque<std::vector<char>>& queue = queued_[static_cast<size_t>(flow)];
    ASSERT_FALSE(queue.empty()) << "a receive on flow " << stage_flow_name(flow) << " before its send";
    ASSERT_EQ(queue.front().size(), bytes);
    std::memcpy(data, queue.front().data(), bytes);
    queue.pop_front();
  }
  double finish_sends() override { return 0.0; }
  bool drained() const { return queued_[0].empty() && queued_[1].empty(); }

 private:
  int stages_;
  std::deque<std::vector<char>> queued_[2];
};

// One micro-batch's inputs and the loss's seed, for the whole model and its parts alike.
struct MicroBatch {
  Tensor tokens, targets, positions, seed;
};

MicroBatch micro_batch(const ModelConfig& config) {
  MicroBatch batch{testing::random_token_ids({2, 8}, 1, config.vocab_size),
                   testing::random_token_ids({2, 8}, 2, config.vocab_size), position_ids(8),
                   Tensor::empty({}, DType::F32)};
  batch.seed.data<float>()[0] = 1.0f;
  return batch;
}

// Binds a graph's parameters (those the model has) and inputs.
void bind_inputs(CompiledGraph& graph, const ModelGraph& model, ParameterSet& params, const MicroBatch& batch) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (model.params[i] >= 0) graph.bind(model.params[i], params.tensor(i));
  }
  for (auto [value, tensor] : {std::pair{model.tokens, &batch.tokens}, {model.targets, &batch.targets},
                               {model.positions, &batch.positions}}) {
    if (value >= 0) graph.bind(value, *tensor);
  }
  if (model.loss >= 0) graph.bind(model.grads.seed, batch.seed);
}

// The whole model's forward and backward pass, run.
struct WholeRun {
  ModelGraph model;
  std::unique_ptr<CompiledGraph> graph;
};

WholeRun run_whole(const ModelConfig& config, const ModelBuildOptions& options, ParameterSet& params,
                   const MicroBatch& batch, Dispatcher& dispatcher) {
  WholeRun whole{build_model_graph(config, 2, 8, true, options), nullptr};
  std::set<int> kept{whole.model.loss};
  for (auto [value, grad] : whole.model.grads.of) kept.insert(grad);
  whole.graph = std::make_unique<CompiledGraph>(whole.model.graph, dispatcher, kept);
  bind_inputs(*whole.graph, whole.model, params, batch);
  whole.graph->run();
  return whole;
}

// The model's parts by `split`, each compiled with its inputs bound (the values its boundary's receives
// stand for NaN: never read).
struct Parts {
  std::vector<ModelGraph> models;
  std::vector<std::unique_ptr<CompiledGraph>> graphs;
};

Parts compiled_parts(const ModelConfig& config, const std::vector<int>& split, ModelBuildOptions options,
                     ParameterSet& params, const MicroBatch& batch, Dispatcher& dispatcher) {
  const ModelFamily& family = model_family(config);
  Parts parts;
  parts.models.reserve(split.size());  // a compiled graph refers to its model's graph
  for (int index = 0; index < static_cast<int>(split.size()); ++index) {
    const RankLayout layout{{}, {index, split}};
    options.parallelize = [layout, &family](const Graph& forward) {
      return parallelize_forward(forward, family.sharding_plan(), std::string(family.layer_prefix()), layout);
    };
    const ModelGraph& model = parts.models.emplace_back(build_model_graph(config, 2, 8, true, options));
    std::set<int> part_kept(model.sent_values.begin(), model.sent_values.end());
    if (model.loss >= 0) part_kept.insert(model.loss);
    for (auto [value, grad] : model.grads.of) part_kept.insert(grad);
    CompiledGraph& graph = *parts.graphs.emplace_back(std::make_unique<CompiledGraph>(model.graph, dispatcher, part_kept));
    bind_inputs(graph, model, params, batch);
    std::vector<int> placeholders = model.received_values;
    if (model.loss < 0) placeholders.insert(placeholders.end(), model.grads.seeds.begin(), model.grads.seeds.end());
    for (int placeholder : placeholders) {
      const TensorMeta& meta = model.graph.value(placeholder).meta;
      Tensor never_read = Tensor::empty(meta.shape, meta.dtype);
      std::fill_n(never_read.data<float>(), never_read.numel(), std::nanf(""));
      graph.bind(placeholder, never_read);
    }
  }
  return parts;
}

// Every part's forward in model order, then every backward in reverse, over a loopback "pp" group.
void run_chained(Parts& parts) {
  const int count = static_cast<int>(parts.models.size());
  auto stages = std::make_shared<LoopbackStages>(count);
  register_collective_group("pp", stages);
  for (int index = 0; index < count; ++index) {  // forwards
    parts.graphs[static_cast<size_t>(index)]->run_nodes(0, 0, parts.models[static_cast<size_t>(index)].first_backward_node);
  }
  for (int index = count - 1; index >= 0; --index) {  // backwards
    const ModelGraph& model = parts.models[static_cast<size_t>(index)];
    parts.graphs[static_cast<size_t>(index)]->run_nodes(0, model.first_backward_node, model.graph.num_nodes());
  }
  register_collective_group("pp", nullptr);
  EXPECT_TRUE(stages->drained());
}

// The last part's loss is the whole model's, and every parameter's gradient, summed over the parts
// holding it (`tied` in two, the others in one), the whole model's, bit for bit.
void expect_whole_models_loss_and_gradients(const Parts& parts, const WholeRun& whole, const ParameterSet& params,
                                            const std::string& tied, const std::string& what) {
  const ModelGraph& last = parts.models.back();
  EXPECT_EQ(parts.graphs.back()->tensor(last.loss).item(), whole.graph->tensor(whole.model.loss).item()) << what;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor sum;
    int holders = 0;
    for (size_t index = 0; index < parts.models.size(); ++index) {
      const ModelGraph& model = parts.models[index];
      if (model.params[i] < 0) continue;
      Tensor grad = parts.graphs[index]->tensor(model.grads.of.at(model.params[i])).clone();
      if (!sum.defined()) {
        sum = grad;
      } else {
        for (int64_t k = 0; k < sum.numel(); ++k) sum.data<float>()[k] += grad.data<float>()[k];
      }
      ++holders;
    }
    ASSERT_GE(holders, 1) << what << ": " << params.spec(i).name << " is in no part";
    EXPECT_EQ(holders, params.spec(i).name == tied ? 2 : 1) << what << ": " << params.spec(i).name;
    const Tensor want = whole.graph->tensor(whole.model.grads.of.at(whole.model.params[i]));
    EXPECT_EQ(0, std::memcmp(sum.raw(), want.raw(), want.nbytes())) << what << ": " << params.spec(i).name;
  }
}

TEST(PipelinePart, ChainedPartsGiveTheWholeModelsLossAndGradientsBitForBit) {
  const ModelConfig config = testing::gpt2_config(4, 2, 16, 101, 8);
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(5));
  const MicroBatch batch = micro_batch(config);
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  for (bool fuse : {false, true}) {
    const ModelBuildOptions options{.fuse = fuse};
    const WholeRun whole = run_whole(config, options, params, batch, *dispatcher);
    for (const std::vector<int>& split : {balanced_layers(2, 4), std::vector<int>{3, 1}, std::vector<int>{1, 3},
                                          balanced_layers(3, 4), balanced_layers(4, 4)}) {
      const int parts = static_cast<int>(split.size());
      Parts chained = compiled_parts(config, split, options, params, batch, *dispatcher);
      for (int index = 0; index < parts; ++index) {
        const ModelGraph& model = chained.models[static_cast<size_t>(index)];
        EXPECT_EQ(model.boundary.receive >= 0, index > 0);
        EXPECT_EQ(model.boundary.send_gradient >= 0, index > 0);
        EXPECT_EQ(model.boundary.send >= 0, index + 1 < parts);
        EXPECT_EQ(model.boundary.receive_gradient, index + 1 < parts ? model.first_backward_node : -1);
      }
      run_chained(chained);
      const std::string what = fmt::format("layers per part {}, fuse {}", fmt::join(split, "+"), fuse);
      expect_whole_models_loss_and_gradients(chained, whole, params, "transformer.wte.weight", what);
    }
  }
}

// A Mixtral-shaped model with both router losses weighted: each boundary carries the activation and
// the four running router sums (probabilities [E], z [], assignments routed and kept [E]); the
// gradients of the activation and of the probability and z sums come back, the counts go forward
// only, and the last part's load-balancing loss over every layer is the whole model's.
TEST(PipelinePart, MixtureOfExpertsPartsCarryTheRouterSumsAndGiveTheWholeModelsLossAndGradients) {
  ModelConfig config = testing::moe_config("mixtral", 4, 4, 2, 32, 24, 101, 4, 2);
  config.router_aux_loss_coef = 0.05;
  config.router_z_loss_coef = 0.01;
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(7));
  const MicroBatch batch = micro_batch(config);
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  for (bool fuse : {false, true}) {
    const ModelBuildOptions options{.fuse = fuse};
    const WholeRun whole = run_whole(config, options, params, batch, *dispatcher);
    for (const std::vector<int>& split : {balanced_layers(2, 4), std::vector<int>{3, 1}, balanced_layers(4, 4)}) {
      const int parts = static_cast<int>(split.size());
      Parts chained = compiled_parts(config, split, options, params, batch, *dispatcher);
      const std::string what = fmt::format("layers per part {}, fuse {}", fmt::join(split, "+"), fuse);
      for (int index = 0; index < parts; ++index) {
        const ModelGraph::BoundaryNodes& boundary = chained.models[static_cast<size_t>(index)].boundary;
        const size_t before = index > 0 ? 1 : 0, after = index + 1 < parts ? 1 : 0;
        EXPECT_EQ(boundary.receives.size(), 5 * before) << what << ", part " << index;
        EXPECT_EQ(boundary.send_gradients.size(), 3 * before) << what << ", part " << index;
        EXPECT_EQ(boundary.sends.size(), 5 * after) << what << ", part " << index;
        EXPECT_EQ(boundary.receive_gradients.size(), 3 * after) << what << ", part " << index;
        const ModelGraph& model = chained.models[static_cast<size_t>(index)];
        if (before) {  // the activation first
          EXPECT_EQ(model.graph.value(model.received_values.at(0)).meta.shape, (Shape{2, 8, 32})) << what;
        }
      }
      run_chained(chained);
      expect_whole_models_loss_and_gradients(chained, whole, params, "", what);
    }
  }
}

}  // namespace
}  // namespace strata
