// The tensor-parallel pass on real ranks: GPT-2 (12 heads, a vocabulary of 4099 that no degree
// divides) built whole and run in one process, against the same model split over the tp group by
// parallelize_tensors with each rank holding its slices of the same weights, with and without
// sequence parallelism (where the 8 positions divide by tp). The loss, the logits'
// shards and every parameter's gradient shard must match the one-process values: f64 on `ref` to
// rounding, f32 on `cpu` within 1e-5. The shards themselves are checked against index formulas
// written out here (Megatron's layouts), not against the slicing code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/backends.h"
#include "comm/communicator.h"
#include "graph/executor.h"
#include "model/model_graph.h"
#include "parallel/device_mesh.h"
#include "parallel/group_collectives.h"
#include "parallel/tensor_parallel.h"
#include "support/gpt2_shapes.h"
#include "support/random_tokens.h"

namespace strata {
namespace {

ModelConfig tiny_config() { return testing::gpt2_config(2, 12, 48, 4099, 8); }

constexpr int64_t kBatch = 2, kSeq = 8;

Tensor token_ids(uint64_t stream, int64_t vocab) { return testing::random_token_ids({kBatch, kSeq}, stream, vocab); }

struct ModelRun {
  double loss = 0;
  std::vector<Tensor> grads;  // per parameter, f64
};

// Forward and backward of `model` on the given parameter tensors and batch.
ModelRun run_model(const std::string& backend, const ModelGraph& model, const std::vector<Tensor>& params,
              const Tensor& tokens, const Tensor& targets) {
  auto dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
  std::set<int> kept{model.loss};
  for (int param : model.params) kept.insert(model.grads.of.at(param));
  CompiledGraph compiled(model.graph, *dispatcher, kept);
  for (size_t i = 0; i < params.size(); ++i) compiled.bind(model.params[i], params[i]);
  Tensor positions = position_ids(kSeq), seed = Tensor::empty({}, DType::F32);
  seed.data<float>()[0] = 1.0f;
  compiled.bind(model.tokens, tokens);
  compiled.bind(model.targets, targets);
  compiled.bind(model.positions, positions);
  compiled.bind(model.grads.seed, seed.to(model.graph.value(model.grads.seed).meta.dtype));
  compiled.run();
  ModelRun run{compiled.tensor(model.loss).to(DType::F64).data<double>()[0], {}};
  for (int param : model.params) run.grads.push_back(compiled.tensor(model.grads.of.at(param)).to(DType::F64));
  return run;
}

// Largest |a - b| over the largest |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    worst = std::max(worst, std::abs(a.data<double>()[i] - b.data<double>()[i]));
    scale = std::max(scale, std::abs(b.data<double>()[i]));
  }
  return scale == 0 ? worst : worst / scale;
}

TEST(TensorParallelGpt2, LossAndEveryGradientShardMatchOneProcess) {
  comm::Communicator world = comm::Communicator::world();
  const ModelConfig config = tiny_config();
  const std::vector<ParamSpec> specs = model_param_specs(config);
  ParameterSet whole(specs);
  whole.initialise(CounterRng(3));
  const Tensor tokens = token_ids(1, config.vocab_size), targets = token_ids(2, config.vocab_size);
  for (int tp : {2, 3, 4, 6}) {
    if (world.size() % tp != 0) continue;
    DeviceMesh mesh(world, MeshShape({{"dp", world.size() / tp}, {"tp", tp}}));
    MeshGroupsRegistration groups(mesh);
    for (bool sequence_parallel : {false, true}) {
      if (sequence_parallel && kSeq % tp != 0) continue;
      const TensorParallelRank rank{tp, mesh.coordinates().at("tp"), "tp", sequence_parallel};
      const std::vector<ParameterShard> shards = parameter_shards(specs, model_family("gpt2").sharding_plan(), rank);
      for (const auto& [backend, dtype, fuse, tolerance] :
           {std::tuple{"ref", DType::F64, false, 1e-11}, std::tuple{"cpu", DType::F32, true, 1e-5}}) {
        ModelBuildOptions options{.dtype = dtype, .fuse = fuse};
        const ModelGraph one = build_model_graph(config, kBatch, kSeq, true, options);
        options.parallelize = [&](const Graph& forward) {
          TensorParallelForward split = parallelize_tensors(forward, model_family("gpt2").sharding_plan(), rank);
          return ParallelForward{.rewritten = std::move(split.rewritten), .layouts = std::move(split.layouts),
                                 .gradient_labels = std::move(split.gradient_labels)};
        };
        const ModelGraph split = build_model_graph(config, kBatch, kSeq, true, options);
        std::vector<Tensor> whole_params, shard_params;
        for (size_t i = 0; i < specs.size(); ++i) {
          whole_params.push_back(whole.tensor(i).to(dtype));
          Tensor shard = Tensor::empty(shards[i].shape(), DType::F32);
          shards[i].slice(whole.tensor(i), shard);
          shard_params.push_back(shard.to(dtype));
        }
        const ModelRun reference = run_model(backend, one, whole_params, tokens, targets);
        const ModelRun parallel = run_model(backend, split, shard_params, tokens, targets);
        const std::string what = fmt::format("tp={}{} rank {} {} {}", tp, sequence_parallel ? " sp" : "", rank.rank,
                                             backend, dtype_name(dtype));
        EXPECT_LE(std::abs(parallel.loss - reference.loss), tolerance * std::abs(reference.loss)) << what << ": loss";
        for (size_t i = 0; i < specs.size(); ++i) {
          Tensor expected = Tensor::empty(shards[i].shape(), DType::F64);
          shards[i].slice(reference.grads[i], expected);
          EXPECT_LE(relative_error(parallel.grads[i], expected), tolerance) << what << ": " << specs[i].name;
        }
      }
    }
  }
}

// Each rank's shard against Megatron's layouts written out as index formulas: c_attn's columns
// are q | k | v, each split by heads; c_proj's rows split evenly; the vocabulary split into
// shards of floor or ceil of 4099 / tp rows, the larger ones last.
TEST(TensorParallelGpt2, ShardsAreTheMatchingSlicesOfTheWholeInitialisation) {
  const ModelConfig config = tiny_config();
  const std::vector<ParamSpec> specs = model_param_specs(config);
  ParameterSet whole(specs);
  whole.initialise(CounterRng(3));
  const int64_t c = config.n_embd, v = config.vocab_size;
  for (int tp : {2, 3, 4, 6}) {
    int64_t vocab_rows_so_far = 0;
    for (int r = 0; r < tp; ++r) {
      const std::vector<ParameterShard> shards = parameter_shards(specs, model_family("gpt2").sharding_plan(), {tp, r, "tp"});
      for (size_t i = 0; i < specs.size(); ++i) {
        Tensor shard = Tensor::empty(shards[i].shape(), DType::F32);
        // The trainer's path: the whole tensor from the seed, then the slice.
        Tensor full = Tensor::empty(specs[i].shape, DType::F32);
        ParameterSet::initialise_tensor(specs[i], full, CounterRng(3));
        shards[i].slice(full, shard);
        const float* got = shard.data<float>();
        const float* want = whole.tensor(i).data<float>();
        const std::string& name = specs[i].name;
        const std::string what = fmt::format("tp={} rank {} {}", tp, r, name);
        if (name.ends_with("attn.c_attn.weight")) {
          const int64_t w = c / tp;
          ASSERT_EQ(shard.shape(), (Shape{c, 3 * w})) << what;
          for (int64_t row = 0; row < c; ++row) {
            for (int64_t part = 0; part < 3; ++part) {
              for (int64_t j = 0; j < w; ++j) {
                ASSERT_EQ(got[row * 3 * w + part * w + j], want[row * 3 * c + part * c + r * w + j]) << what;
              }
            }
          }
        } else if (name.ends_with("attn.c_attn.bias")) {
          const int64_t w = c / tp;
          ASSERT_EQ(shard.shape(), (Shape{3 * w})) << what;
          for (int64_t part = 0; part < 3; ++part) {
            for (int64_t j = 0; j < w; ++j) ASSERT_EQ(got[part * w + j], want[part * c + r * w + j]) << what;
          }
        } else if (name.ends_with("mlp.c_fc.bias")) {
          const int64_t w = 4 * c / tp;
          ASSERT_EQ(shard.shape(), (Shape{w})) << what;
          for (int64_t j = 0; j < w; ++j) ASSERT_EQ(got[j], want[r * w + j]) << what;
        } else if (name.ends_with("mlp.c_fc.weight")) {
          const int64_t w = 4 * c / tp;
          ASSERT_EQ(shard.shape(), (Shape{c, w})) << what;
          for (int64_t row = 0; row < c; ++row) {
            for (int64_t j = 0; j < w; ++j) ASSERT_EQ(got[row * w + j], want[row * 4 * c + r * w + j]) << what;
          }
        } else if (name.ends_with("c_proj.weight")) {
          const int64_t rows = specs[i].shape[0] / tp;
          ASSERT_EQ(shard.shape(), (Shape{rows, c})) << what;
          for (int64_t k = 0; k < rows * c; ++k) ASSERT_EQ(got[k], want[r * rows * c + k]) << what;
        } else if (name == "transformer.wte.weight") {
          const int64_t rows = shard.shape()[0];
          ASSERT_TRUE(rows == v / tp || rows == v / tp + 1) << what << ": " << rows << " rows";
          for (int64_t k = 0; k < rows * c; ++k) ASSERT_EQ(got[k], want[vocab_rows_so_far * c + k]) << what;
          vocab_rows_so_far += rows;
        } else if (name.ends_with("c_proj.bias") || name.find("ln_") != std::string::npos ||
                   name == "transformer.wpe.weight") {
          ASSERT_EQ(shard.shape(), specs[i].shape) << what << " is replicated";
          for (int64_t k = 0; k < shard.numel(); ++k) ASSERT_EQ(got[k], want[k]) << what;
        }
      }
    }
    EXPECT_EQ(vocab_rows_so_far, v) << "tp=" << tp << ": the shards cover the vocabulary once";
  }
}

}  // namespace
}  // namespace strata
