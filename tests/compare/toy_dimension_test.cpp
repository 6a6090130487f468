// The parallel-dimension seam is real: a dimension registered by this test binary alone (one
// coordinate, placing nothing) joins the mesh, and a training run with its planner prediction, a
// checkpoint and a resume, `strata compare`'s capture, and the planner's search and report all run
// with it, with no edit to their files, giving the same bits as without it.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "planner/auto_plan.h"
#include "planner/model_spec.h"
#include "planner/plan_dimension.h"
#include "planner/report.h"
#include "train/tiny_training_test.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// The toy's coordinates would be replicas doing the same work (it places nothing): the planner
// searches every degree the devices allow and refuses those above 1.
const std::string kToyReplicates = "layouts whose toy dimension replicates the model for nothing";

PlannerDimension toy_planning() {
  return {.name = "xp",
          .parallelism = "toy",
          .fix_help = "Fix the toy degree",
          .degrees = [](const PlanningProblem&, int devices) {
            std::vector<int> degrees;
            for (int degree = 1; degree <= devices; ++degree) {
              if (devices % degree == 0) degrees.push_back(degree);
            }
            return degrees;
          },
          .reject_layout = [](const PlanningProblem&, int degree) -> std::optional<std::string> {
            if (degree == 1) return std::nullopt;
            return kToyReplicates;
          }};
}

// The toy with a cost of its own, priced by the cost model with no edit to its files: every layer's
// forward sends a message of fixed duration per micro-batch along it (above degree 1), and nothing
// backward, so what the backward pass hides of the gradients' reduction is as without it.
constexpr double kToyLayerForwardSeconds = 1e-3;

PlannerDimension costly_toy_planning() {
  PlannerDimension part = toy_planning();
  part.comm_name = "toy exchanges";
  part.micro_batch_comm = [](const CommInput& input) {
    MicroBatchComm comm;
    if (input.degree > 1) comm.layer.forward = kToyLayerForwardSeconds;
    return comm;
  };
  return part;
}

class RegisteredToyDimension {
 public:
  explicit RegisteredToyDimension(PlannerDimension part = toy_planning()) {
    register_parallel_dimension({.name = "xp", .nesting = 3});
    register_planner_dimension(std::move(part));
  }
  ~RegisteredToyDimension() {
    unregister_planner_dimension("xp");
    unregister_parallel_dimension("xp");
  }
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

// parallel.plan = "auto": the planner searches this one-rank job with the toy's part among the
// dimensions (held at the mesh's degree 1), and the run takes the plan it takes without the toy.
TEST_F(ToyDimension, TheTrainersAutoPlanChoosesAsWithoutIt) {
  const auto chosen = [&](const std::string& run) {
    Trainer(config(run, {"parallel.plan=auto", "parallel.cluster=this-machine", "train.steps=2"})).run();
    return nlohmann::json::parse(std::ifstream(root() / run / "plan.json"))["chosen"];
  };
  const nlohmann::json plain = chosen("auto_plain");
  RegisteredToyDimension toy;
  const nlohmann::json with_toy = chosen("auto_toy");
  EXPECT_EQ(with_toy["plan"]["xp"], 1) << with_toy.dump();
  EXPECT_EQ(with_toy["plan"]["micro_batch"], plain["plan"]["micro_batch"]);
  EXPECT_EQ(with_toy["step_s"], plain["step_s"]);
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

// The search over a node of 8 devices tries the toy's degrees 2, 4 and 8 and refuses every such
// layout, naming the dimension; the plans it ranks are the ones it ranks without the toy, each with
// the toy at 1 in its description and JSON.
TEST(ToyDimensionPlanner, TheSearchTriesItsDegreesRefusesThemAndReportsItsPlans) {
  const ModelSpec gpt2 = model_preset("gpt2-small");
  const PlanningProblem problem{gpt2.name, gpt2.config, 64, 1024, DType::BF16, resolve_cluster("dgx-h100")};
  ASSERT_EQ(problem.cluster.devices(), 8);
  CostModel plain_model(problem);
  const SearchResult plain = search_plans(plain_model, {}, 5);
  RegisteredToyDimension toy;
  CostModel toy_model(problem);
  const SearchResult with_toy = search_plans(toy_model, {}, 5);

  // Layouts with the toy above 1: of 8 = tp x pp x xp x dp, xp = 2 leaves 4 for three dimensions
  // (6 ways), xp = 4 leaves 2 (3 ways), xp = 8 leaves 1 (1 way); every tp of these divides the 12
  // heads and every pp is below the 12 layers, so the toy's check is the one that refuses them.
  const auto refused = std::find_if(with_toy.rejected.begin(), with_toy.rejected.end(),
                                    [](const RejectedRegion& region) { return region.reason == kToyReplicates; });
  ASSERT_NE(refused, with_toy.rejected.end());
  EXPECT_EQ(refused->count, 6 + 3 + 1);
  EXPECT_NE(refused->example.find("xp=2"), std::string::npos) << refused->example;

  EXPECT_EQ(with_toy.candidates, plain.candidates);
  EXPECT_EQ(with_toy.feasible, plain.feasible);
  ASSERT_EQ(with_toy.ranked.size(), plain.ranked.size());
  const nlohmann::json report = report_json(toy_model, with_toy, 5);
  const std::string text = format_report(toy_model, with_toy, 5);
  for (size_t i = 0; i < plain.ranked.size(); ++i) {
    const ParallelPlan& toy_plan = with_toy.ranked[i].plan;
    const ParallelPlan& plain_plan = plain.ranked[i].plan;
    EXPECT_EQ(with_toy.ranked[i].step_s, plain.ranked[i].step_s) << plain_plan.describe();
    for (const char* dimension : {"dp", "tp", "pp", "ep"}) {
      EXPECT_EQ(toy_plan.degree(dimension), plain_plan.degree(dimension)) << dimension;
    }
    EXPECT_EQ(toy_plan.degree("xp"), 1);
    EXPECT_NE(toy_plan.describe().find(" xp=1"), std::string::npos) << toy_plan.describe();
    EXPECT_NE(text.find(toy_plan.describe()), std::string::npos) << text;
    EXPECT_EQ(report["plans"][i]["plan"]["xp"], 1) << report["plans"][i].dump();
  }
  EXPECT_NE(text.find(kToyReplicates), std::string::npos) << text;

  // A toy degree the user fixes is searched alone, and refused by the same check.
  PlanLimits fixed;
  fixed.fixed.set("xp", 2);
  const SearchResult forced = search_plans(toy_model, fixed, 5);
  EXPECT_TRUE(forced.ranked.empty());
  ASSERT_FALSE(forced.rejected.empty());
  EXPECT_EQ(forced.rejected.front().reason, kToyReplicates);
  EXPECT_EQ(forced.rejected.front().count, 6);
}

// A toy with a communication term of its own: the cost model prices it in the stages' time (its
// forward per layer and micro-batch, again when full recomputation redoes the forward), and the
// report names it, with no edit to the cost model's or the report's files.
TEST(ToyDimensionPlanner, ItsOwnCommunicationIsPricedAndReportedWithoutEditsToTheCostModel) {
  const ModelSpec gpt2 = model_preset("gpt2-small");
  const PlanningProblem problem{gpt2.name, gpt2.config, 64, 1024, DType::BF16, resolve_cluster("dgx-h100")};
  ParallelPlan plan;  // 8 devices: dp 4 x toy 2; 4 rows x 4 micro-batches x 4 replicas = 64
  plan.degrees.set("dp", 4);
  plan.micro_batch = 4;
  plan.micro_batches = 4;
  // What is read by the dimensions' names, read while the toy is registered.
  struct Priced {
    Prediction prediction;
    double toy_comm = 0, reduction = 0;
    std::string text;
  };
  const auto predict = [&](PlannerDimension part, RecomputeMode recompute) {
    RegisteredToyDimension toy(std::move(part));
    ParallelPlan toy_plan = plan;
    toy_plan.degrees.set("xp", 2);
    toy_plan.recompute = recompute;
    CostModel model(problem);
    EXPECT_EQ(model.invalid_reason(toy_plan), std::nullopt);
    const Prediction prediction = model.evaluate(toy_plan);
    return Priced{prediction, prediction.time.comm["xp"], prediction.time.reduction["dp"],
                  format_report(model, {.ranked = {prediction}}, 1)};
  };
  // By hand: one stage of 12 layers, 4 micro-batches, each layer's forward 1 ms more.
  const double layers = 12, micro_batches = 4;
  const double added = micro_batches * layers * kToyLayerForwardSeconds;
  for (RecomputeMode recompute : {RecomputeMode::None, RecomputeMode::Full}) {
    const Priced free_toy = predict(toy_planning(), recompute);
    const Priced costly_toy = predict(costly_toy_planning(), recompute);
    const Prediction &free = free_toy.prediction, &costly = costly_toy.prediction;
    EXPECT_EQ(free_toy.toy_comm, 0.0);
    EXPECT_DOUBLE_EQ(costly_toy.toy_comm, added);
    // Full recomputation runs the forward's communication again.
    EXPECT_NEAR(costly.time.recompute - free.time.recompute, recompute == RecomputeMode::Full ? added : 0.0,
                1e-12);
    EXPECT_EQ(costly.time.compute, free.time.compute);
    EXPECT_EQ(costly.time.bubble, free.time.bubble);
    EXPECT_EQ(costly.memory.peak, free.memory.peak);
    EXPECT_NE(costly_toy.text.find("toy exchanges 48.00 ms"), std::string::npos) << costly_toy.text;
    EXPECT_EQ(free_toy.text.find("toy exchanges"), std::string::npos) << free_toy.text;
    if (recompute == RecomputeMode::None) {
      // The step is longer by the toy's time alone: the backward pass, which hides the gradients' reduction,
      // is as without it (under full recomputation it redoes the toy's forward, and hides more).
      EXPECT_NEAR(costly.step_s - free.step_s, added, 1e-12);
      EXPECT_EQ(costly_toy.reduction, free_toy.reduction);
    }
  }

  RegisteredToyDimension toy(costly_toy_planning());
  ParallelPlan toy_plan = plan;
  toy_plan.degrees.set("xp", 2);
  CostModel model(problem);
  const Prediction prediction = model.evaluate(toy_plan);
  // --explain's terms: the toy's communication over the step under its name.
  EXPECT_DOUBLE_EQ(model.attribute(prediction).comm_seconds("toy exchanges"), added);
  const nlohmann::json time = prediction_json(prediction)["time_s"];
  EXPECT_DOUBLE_EQ(time.at("xp_comm").get<double>(), added) << time.dump();
  EXPECT_EQ(time.at("tp_comm").get<double>(), 0.0) << time.dump();
}

}  // namespace
}  // namespace strata
