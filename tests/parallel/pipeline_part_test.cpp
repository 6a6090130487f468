// The pipeline cut on one process: GPT-2's parts chained through their stage-boundary ops (every
// part's forward in model order, then every backward in reverse, over a loopback "pp" group that
// hands each flow's sends to its receives in order) give the whole model's loss and every
// parameter's gradient bit for bit (the tied embedding's two copies summed), for 2, 3 and 4 parts
// of 4 layers, even and not (the planner's splits may be uneven), fused and not.
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

TEST(PipelinePart, ChainedPartsGiveTheWholeModelsLossAndGradientsBitForBit) {
  const ModelConfig config = testing::gpt2_config(4, 2, 16, 101, 8);
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(5));
  const Tensor tokens = testing::random_token_ids({2, 8}, 1, config.vocab_size),
               targets = testing::random_token_ids({2, 8}, 2, config.vocab_size), positions = position_ids(8);
  Tensor seed = Tensor::empty({}, DType::F32);
  seed.data<float>()[0] = 1.0f;
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  for (bool fuse : {false, true}) {
    ModelBuildOptions options{.fuse = fuse};
    const ModelGraph whole = build_model_graph(config, 2, 8, true, options);
    std::set<int> kept{whole.loss};
    for (auto [value, grad] : whole.grads.of) kept.insert(grad);
    CompiledGraph reference(whole.graph, *dispatcher, kept);
    for (size_t i = 0; i < params.size(); ++i) reference.bind(whole.params[i], params.tensor(i));
    reference.bind(whole.tokens, tokens);
    reference.bind(whole.targets, targets);
    reference.bind(whole.positions, positions);
    reference.bind(whole.grads.seed, seed);
    reference.run();
    for (const std::vector<int>& split : {balanced_layers(2, 4), std::vector<int>{3, 1}, std::vector<int>{1, 3},
                                          balanced_layers(3, 4), balanced_layers(4, 4)}) {
      const int parts = static_cast<int>(split.size());
      std::vector<ModelGraph> models;
      std::vector<std::unique_ptr<CompiledGraph>> graphs;
      for (int index = 0; index < parts; ++index) {
        const RankLayout layout{{}, {index, split}};
        options.parallelize = [layout](const Graph& forward) {
          return parallelize_forward(forward, model_family("gpt2").sharding_plan(), "transformer.h.", layout);
        };
        models.push_back(build_model_graph(config, 2, 8, true, options));
      }
      auto stages = std::make_shared<LoopbackStages>(parts);
      register_collective_group("pp", stages);
      for (int index = 0; index < parts; ++index) {
        const ModelGraph& model = models[static_cast<size_t>(index)];
        std::set<int> part_kept;
        for (int value : {model.loss, model.sent}) {
          if (value >= 0) part_kept.insert(value);
        }
        for (auto [value, grad] : model.grads.of) part_kept.insert(grad);
        graphs.push_back(std::make_unique<CompiledGraph>(model.graph, *dispatcher, part_kept));
        CompiledGraph& graph = *graphs.back();
        for (size_t i = 0; i < params.size(); ++i) {
          if (model.params[i] >= 0) graph.bind(model.params[i], params.tensor(i));
        }
        for (auto [value, tensor] : {std::pair{model.tokens, &tokens}, {model.targets, &targets}, {model.positions, &positions}}) {
          if (value >= 0) graph.bind(value, *tensor);
        }
        // The values the boundary's receives stand for are never read.
        for (int placeholder : {model.received, model.loss >= 0 ? -1 : model.grads.seed}) {
          if (placeholder < 0) continue;
          const TensorMeta& meta = model.graph.value(placeholder).meta;
          Tensor never_read = Tensor::empty(meta.shape, meta.dtype);
          std::fill_n(never_read.data<float>(), never_read.numel(), std::nanf(""));
          graph.bind(placeholder, never_read);
        }
        if (model.loss >= 0) graph.bind(model.grads.seed, seed);
        EXPECT_EQ(model.boundary.receive >= 0, index > 0);
        EXPECT_EQ(model.boundary.send_gradient >= 0, index > 0);
        EXPECT_EQ(model.boundary.send >= 0, index + 1 < parts);
        EXPECT_EQ(model.boundary.receive_gradient, index + 1 < parts ? model.first_backward_node : -1);
      }
      for (int index = 0; index < parts; ++index) {  // forwards
        graphs[static_cast<size_t>(index)]->run_nodes(0, 0, models[static_cast<size_t>(index)].first_backward_node);
      }
      for (int index = parts - 1; index >= 0; --index) {  // backwards
        const ModelGraph& model = models[static_cast<size_t>(index)];
        graphs[static_cast<size_t>(index)]->run_nodes(0, model.first_backward_node, model.graph.num_nodes());
      }
      register_collective_group("pp", nullptr);
      EXPECT_TRUE(stages->drained());
      const std::string what = fmt::format("layers per part {}, fuse {}", fmt::join(split, "+"), fuse);
      const ModelGraph& last = models.back();
      EXPECT_EQ(graphs.back()->tensor(last.loss).item(), reference.tensor(whole.loss).item()) << what;
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor sum;
        int holders = 0;
        for (int index = 0; index < parts; ++index) {
          const ModelGraph& model = models[static_cast<size_t>(index)];
          if (model.params[i] < 0) continue;
          Tensor grad = graphs[static_cast<size_t>(index)]->tensor(model.grads.of.at(model.params[i])).clone();
          if (!sum.defined()) {
            sum = grad;
          } else {
            for (int64_t k = 0; k < sum.numel(); ++k) sum.data<float>()[k] += grad.data<float>()[k];
          }
          ++holders;
        }
        ASSERT_GE(holders, 1) << what << ": " << params.spec(i).name << " is in no part";
        EXPECT_EQ(holders, params.spec(i).name == "transformer.wte.weight" ? 2 : 1) << what << ": " << params.spec(i).name;
        const Tensor want = reference.tensor(whole.grads.of.at(whole.params[i]));
        EXPECT_EQ(0, std::memcmp(sum.raw(), want.raw(), want.nbytes())) << what << ": " << params.spec(i).name;
      }
    }
  }
}

}  // namespace
}  // namespace strata
