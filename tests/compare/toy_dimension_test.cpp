// The parallel-dimension seam is real: a dimension registered by this test binary alone (one
// coordinate, placing nothing) joins the mesh, and a training run with its planner prediction, a
// checkpoint and a resume, and `strata compare`'s capture all run with it, with no edit to their
// files, giving the same bits as without it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/shard_plan.h"
#include "compare/capture.h"
#include "model/family.h"
#include "parallel/device_mesh.h"
#include "parallel/parameter_placement.h"
#include "train/tiny_training_test.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class RegisteredToyDimension {
 public:
  RegisteredToyDimension() { register_parallel_dimension({.name = "xp", .nesting = 3}); }
  ~RegisteredToyDimension() { unregister_parallel_dimension("xp"); }
};

// What a run leaves that must not change: every line of metrics.jsonl but its timings, the
// planner's predicted step time, and the last checkpoint's tensors.
struct RunBits {
  std::vector<std::string> metrics;
  double predicted_step_s = 0;
  TensorMap checkpoint;
};

class ToyDimension : public testing::TinyTrainingTest {
 protected:
  // Six steps, saved after step 3 and stopped there, then resumed to the end; predicted on a preset.
  RunBits train_resumed(const std::string& run) {
    const std::vector<std::string> settings{"checkpoint.every=3", "checkpoint.keep=0",
                                            "parallel.cluster=dgx-a100-80gb"};
    std::vector<std::string> first = settings;
    first.push_back("train.exit_at_step=3");
    Trainer(config(run, first)).run();
    Trainer(config(run, settings)).run();
    RunBits bits;
    std::ifstream lines(root() / run / "metrics.jsonl");
    for (std::string line; std::getline(lines, line);) {
      nlohmann::json metrics = nlohmann::json::parse(line);
      for (const char* timing : {"tokens_per_s", "elapsed_s", "mfu"}) metrics.erase(timing);
      bits.metrics.push_back(metrics.dump());
    }
    std::ifstream plan(root() / run / "plan.json");
    bits.predicted_step_s = nlohmann::json::parse(plan)["chosen"]["step_s"].get<double>();
    Checkpoint checkpoint(root() / run / "step_00000006");
    for (const auto& [name, stored] : checkpoint.tensors()) {
      Tensor tensor = Tensor::empty(stored.shape, stored.dtype);
      checkpoint.read(name, tensor);
      bits.checkpoint[name] = tensor;
    }
    return bits;
  }

  size_t captured_tensors(const std::string& run) {
    size_t count = 0;
    capture_run(config(run), {.steps = 1}, [&](CapturedTensor&&) { ++count; });
    return count;
  }
};

TEST_F(ToyDimension, JoinsTheMeshAndTrainingCheckpointsThePlannerAndCompareRunWithItUnchanged) {
  const RunBits plain = train_resumed("plain");
  const size_t plain_captured = captured_tensors("plain_capture");
  RegisteredToyDimension toy;

  const MeshShape shape({{"dp", 2}, {"tp", 2}});
  EXPECT_EQ(shape.degree("xp"), 1);
  EXPECT_EQ(shape.size(), 4);
  EXPECT_EQ(shape.extents().back().dimension, "xp");  // outermost: the highest nesting
  EXPECT_NE(shape.keys().find("'parallel.pp' (1) and 'parallel.xp' (1)"), std::string::npos) << shape.keys();
  EXPECT_EQ(group_ranks(3, shape, "xp"), std::vector<int>{3});

  const RunBits with_toy = train_resumed("with_toy");
  EXPECT_EQ(with_toy.metrics, plain.metrics);
  EXPECT_EQ(with_toy.predicted_step_s, plain.predicted_step_s);
  ASSERT_EQ(with_toy.checkpoint.size(), plain.checkpoint.size());
  for (const auto& [name, tensor] : plain.checkpoint) {
    const Tensor& other = with_toy.checkpoint.at(name);
    EXPECT_TRUE(other.shape() == tensor.shape() && std::memcmp(other.raw(), tensor.raw(), tensor.nbytes()) == 0)
        << name;
  }
  EXPECT_EQ(captured_tensors("toy_capture"), plain_captured);
}

// At two coordinates the dimension's ranks are replicas of each other: the checkpoint's shard plan
// still saves every box once, with the keys it had, each by a rank holding that box, and spreads
// the writing over both replicas.
TEST_F(ToyDimension, TwoCoordinatesAreReplicasTheCheckpointSavesOnce) {
  const ModelConfig model = config("unused").model;
  const std::vector<ParamSpec> specs = model_param_specs(model);
  const MeshShape split({{"tp", 2}});
  const std::vector<ShardPiece> plain = checkpoint_pieces(specs, split, place_parameters(split, {model, specs}));
  RegisteredToyDimension toy;
  const MeshShape doubled({{"tp", 2}, {"xp", 2}});
  const std::vector<ShardPiece> replicated = checkpoint_pieces(specs, doubled, place_parameters(doubled, {model, specs}));
  ASSERT_EQ(replicated.size(), plain.size());
  std::set<int> writers;
  for (size_t p = 0; p < plain.size(); ++p) {
    EXPECT_EQ(replicated[p].key, plain[p].key);
    EXPECT_TRUE(replicated[p].box == plain[p].box) << plain[p].key;
    const MeshCoordinates writer = coordinates_of(replicated[p].writer, doubled);
    if (plain[p].key != specs[plain[p].param].name) {  // a tensor-parallel shard's box
      EXPECT_EQ(writer.at(replicated[p].split_by), replicated[p].shard) << plain[p].key;
    }
    writers.insert(writer.at("xp"));
  }
  EXPECT_EQ(writers, (std::set<int>{0, 1}));
}

}  // namespace
}  // namespace strata
