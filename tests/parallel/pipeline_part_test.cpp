// The pipeline cut on one process: GPT-2's parts chained by hand (each part's forward, the sent
// activation copied into the next part's input; the last part's backward, the received
// activation's gradient copied into the previous part's seed) give the whole model's loss and
// every parameter's gradient bit for bit (the tied embedding's two copies summed), for 2, 3 and 4
// parts of 4 layers, even and not (the planner's splits may be uneven), fused and not.
#include <gtest/gtest.h>

#include <cstring>

#include <fmt/ranges.h>

#include "backends/backends.h"
#include "core/rng.h"
#include "graph/executor.h"
#include "model/gpt2_block.h"
#include "parallel/parallelize.h"
#include "support/gpt2_shapes.h"
#include "support/random_tokens.h"

namespace strata {
namespace {

TEST(PipelinePart, ChainedPartsGiveTheWholeModelsLossAndGradientsBitForBit) {
  const GPT2Config config = testing::gpt2_config(4, 2, 16, 101, 8);
  ParameterSet params(gpt2_param_specs(config));
  params.initialise(CounterRng(5));
  const Tensor tokens = testing::random_token_ids({2, 8}, 1, config.vocab_size),
               targets = testing::random_token_ids({2, 8}, 2, config.vocab_size), positions = position_ids(8);
  Tensor seed = Tensor::empty({}, DType::F32);
  seed.data<float>()[0] = 1.0f;
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  for (bool fuse : {false, true}) {
    GPT2BuildOptions options{.fuse = fuse};
    const GPT2Graph whole = build_gpt2_graph(config, 2, 8, true, options);
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
      std::vector<GPT2Graph> models;
      std::vector<std::unique_ptr<CompiledGraph>> graphs;
      for (int index = 0; index < parts; ++index) {
        const RankLayout layout{{}, {index, split}};
        options.parallelize = [layout](const Graph& forward) {
          return parallelize_forward(forward, gpt2_sharding_plan(), kGPT2LayerPrefix, layout);
        };
        models.push_back(build_gpt2_graph(config, 2, 8, true, options));
      }
      std::vector<Tensor> received(static_cast<size_t>(parts)), sent_grad(static_cast<size_t>(parts));
      for (int index = 0; index < parts; ++index) {
        const GPT2Graph& model = models[static_cast<size_t>(index)];
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
        if (model.received >= 0) {
          received[static_cast<size_t>(index)] = Tensor::empty(model.graph.value(model.received).meta.shape, DType::F32);
          graph.bind(model.received, received[static_cast<size_t>(index)]);
        }
        if (model.loss >= 0) {
          graph.bind(model.grads.seed, seed);
        } else {
          sent_grad[static_cast<size_t>(index)] = Tensor::empty(model.graph.value(model.sent).meta.shape, DType::F32);
          graph.bind(model.grads.seed, sent_grad[static_cast<size_t>(index)]);
        }
      }
      for (int index = 0; index < parts; ++index) {  // forwards
        const GPT2Graph& model = models[static_cast<size_t>(index)];
        graphs[static_cast<size_t>(index)]->run_nodes(0, 0, model.first_backward_node);
        if (model.sent >= 0) received[static_cast<size_t>(index + 1)].copy_from(graphs[index]->tensor(model.sent));
      }
      for (int index = parts - 1; index >= 0; --index) {  // backwards
        const GPT2Graph& model = models[static_cast<size_t>(index)];
        graphs[static_cast<size_t>(index)]->run_nodes(0, model.first_backward_node, model.graph.num_nodes());
        if (model.received >= 0) {
          sent_grad[static_cast<size_t>(index - 1)].copy_from(
              graphs[index]->tensor(model.grads.of.at(model.received)));
        }
      }
      const std::string what = fmt::format("layers per part {}, fuse {}", fmt::join(split, "+"), fuse);
      const GPT2Graph& last = models.back();
      EXPECT_EQ(graphs.back()->tensor(last.loss).item(), reference.tensor(whole.loss).item()) << what;
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor sum;
        int holders = 0;
        for (int index = 0; index < parts; ++index) {
          const GPT2Graph& model = models[static_cast<size_t>(index)];
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
