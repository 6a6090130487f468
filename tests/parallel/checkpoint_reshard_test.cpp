// Checkpoints independent of the layout: a run trains 10 of 20 steps in layout
// A and exits there (train.exit_at_step), then resumes in layout B for the
// other 10; it must follow 20 uninterrupted steps in layout A: bit-identical
// when B is A, otherwise within the cross-layout tolerance of the parallel
// runtime (losses 1e-5 relative per step, parameters 1e-5 of each tensor's
// largest value). The model has an odd vocabulary (4099: uneven vocabulary
// shards) and small gradient buckets (several per rank).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <string>

#include "parallel/run_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::mpirun;

const std::string kSettings =
    "--set train.batch_size=2 --set train.global_batch=12 --set parallel.bucket_mb=0.02 --set checkpoint.every=0";
const std::string kStep20 = "step_00000020";

struct Layout {
  std::string name;
  int ranks;
  std::string settings;
};

const Layout kSingle{"single", 1, ""};
const Layout kDp2{"dp2", 2, ""};
const Layout kDp3{"dp3", 3, ""};
const Layout kDp2Zero1{"dp2_zero1", 2, "--set parallel.zero=1"};
const Layout kTp2{"tp2", 2, "--set parallel.tp=2"};
const Layout kPp2{"pp2", 2, "--set parallel.pp=2"};
const Layout kDp2Tp2{"dp2_tp2", 4, "--set parallel.tp=2"};
const Layout kDp2Tp2Pp2{"dp2_tp2_pp2", 8, "--set parallel.tp=2 --set parallel.pp=2"};

class CheckpointReshard : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("checkpoint_reshard", "n_layer = 2\nn_head = 4\nn_embd = 32\nvocab_size = 4099\nblock_size = 16\n");
  }

  std::string launcher(const Layout& layout) { return layout.ranks > 1 ? mpirun(layout.ranks) : ""; }

  // 20 straight steps in `from`, and 10 in `from` then 10 in `to` in one run directory.
  void expect_resumes(const Layout& from, const Layout& to) {
    const std::string what = from.name + " -> " + to.name;
    fs::path straight = root() / ("straight_" + from.name);
    if (!fs::exists(straight / kStep20)) straight = train("straight_" + from.name, launcher(from), kSettings + " " + from.settings);
    const std::string run = "resharded_" + from.name + "_to_" + to.name;
    train(run, launcher(from), kSettings + " " + from.settings + " --set train.exit_at_step=10");
    EXPECT_NE(last_output_.find("exit at step 10 (train.exit_at_step) of 20"), std::string::npos) << last_output_;
    fs::path resumed = train(run, launcher(to), kSettings + " " + to.settings + " --set checkpoint.resume=true");
    EXPECT_NE(last_output_.find("resumed from"), std::string::npos) << what << "\n" << last_output_;
    if (from.name == to.name) {
      testing::expect_identical_runs(straight, resumed, kStep20, what);
    } else {
      EXPECT_NE(last_output_.find("resharded to this run's layout"), std::string::npos) << what << "\n" << last_output_;
      testing::expect_close_runs(straight, resumed, kStep20, 1e-5, what);
    }
  }
};

TEST_F(CheckpointReshard, OneProcessToTwoDataParallelRanks) { expect_resumes(kSingle, kDp2); }

TEST_F(CheckpointReshard, TwoDataParallelRanksToThree) { expect_resumes(kDp2, kDp3); }

TEST_F(CheckpointReshard, ZeroOneToTensorParallelism) { expect_resumes(kDp2Zero1, kTp2); }

TEST_F(CheckpointReshard, ZeroOneAtTheSameLayoutIsBitIdentical) { expect_resumes(kDp2Zero1, kDp2Zero1); }

TEST_F(CheckpointReshard, TensorParallelismToPipeline) { expect_resumes(kTp2, kPp2); }

TEST_F(CheckpointReshard, PipelineToDataTimesTensor) { expect_resumes(kPp2, kDp2Tp2); }

TEST_F(CheckpointReshard, EightRanksOfEveryKindToOneProcess) { expect_resumes(kDp2Tp2Pp2, kSingle); }

// Each rank writes only the pieces it holds: eight ranks' tensor-parallel shards are boxes of the
// global tensors, each stored once, and the replicated ones are spread over their holders.
TEST_F(CheckpointReshard, EveryRankWritesOnlyWhatItHoldsAndEachPieceOnce) {
  fs::path run = train("pieces_dp2_tp2_pp2", mpirun(8), kSettings + " " + kDp2Tp2Pp2.settings + " --set train.steps=2");
  Checkpoint checkpoint(run / "step_00000002");
  EXPECT_EQ(checkpoint.tensors().size(), 3u * (2 + 12 * 2 + 2));  // parameters and both moments
  int64_t elements = 0;
  for (const auto& [name, stored] : checkpoint.tensors()) {
    elements += shape_numel(stored.shape);
    if (name == "transformer.h.0.attn.c_attn.weight") {
      EXPECT_EQ(stored.pieces.size(), 6u) << "q, k and v of two tensor-parallel ranks";
    }
    if (name == "transformer.wte.weight") {
      ASSERT_EQ(stored.pieces.size(), 2u);
      EXPECT_EQ(stored.pieces[0].box.lengths[0] + stored.pieces[1].box.lengths[0], 4099);
    }
  }
  // The files hold nothing but the pieces: no replica is written twice.
  size_t stored_bytes = 0;
  for (const std::string& file : checkpoint.files()) {
    for (const auto& [key, entry] : checkpoint.open(file).entries()) stored_bytes += entry.end - entry.begin;
  }
  EXPECT_EQ(stored_bytes, static_cast<size_t>(elements) * sizeof(float));
  EXPECT_GT(checkpoint.files().size(), 2u) << "writing spread over the ranks";
}

// Layouts the pairs above leave out: an interleaved pipeline (two model chunks per stage) with
// sequence parallelism, into one process, on a model deep enough to interleave.
class CheckpointReshardDeep : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("checkpoint_reshard_deep", "n_layer = 4\nn_head = 4\nn_embd = 32\nvocab_size = 4099\nblock_size = 16\n");
  }
};

TEST_F(CheckpointReshardDeep, InterleavedStagesWithSequenceParallelismToOneProcess) {
  const std::string settings = kSettings + " --set parallel.pp=2 --set parallel.tp=2 --set parallel.sp=true " +
                               "--set parallel.schedule=interleaved --set parallel.virtual_stages=2";
  fs::path straight = train("straight_interleaved", mpirun(4), settings);
  train("interleaved_to_one", mpirun(4), settings + " --set train.exit_at_step=10");
  fs::path resumed = train("interleaved_to_one", "", kSettings + " --set checkpoint.resume=true");
  EXPECT_NE(last_output_.find("resharded to this run's layout"), std::string::npos) << last_output_;
  testing::expect_close_runs(straight, resumed, kStep20, 1e-5, "pp2 x v2 x tp2 + sp -> 1");
}

// `strata ckpt convert` reshards offline: to one process and back to the layout that saved it
// gives every rank file bit for bit, and a run of the target layout resumes from the conversion.
TEST_F(CheckpointReshard, ConvertToOneProcessAndBackReproducesEveryStoredPiece) {
  const std::string settings = kSettings + " --set parallel.tp=2 --set parallel.pp=2";
  fs::path run = train("convert_source", mpirun(4), settings + " --set train.exit_at_step=10");
  const fs::path converted = root() / "converted_to_one", back = root() / "converted_back";
  for (const auto& [from, to, layout] : {std::tuple{run, converted, "dp=1"}, std::tuple{converted, back, "tp=2,pp=2"}}) {
    testing::LaunchResult result = testing::shell(std::string(STRATA_EXECUTABLE) + " ckpt convert " + from.string() +
                                                  " " + to.string() + " --layout " + layout);
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  const Checkpoint original(run / "step_00000010"), returned(back / "step_00000010");
  ASSERT_EQ(original.files(), returned.files());
  for (const std::string& file : original.files()) {
    EXPECT_TRUE(testing::file_bytes(original.dir() / file) == testing::file_bytes(returned.dir() / file)) << file;
  }
  EXPECT_EQ(Checkpoint(converted / "step_00000010").files(), std::vector<std::string>{"rank_00000.safetensors"});
  testing::LaunchResult inspect = testing::shell(std::string(STRATA_EXECUTABLE) + " ckpt inspect " + converted.string());
  EXPECT_NE(inspect.output.find("transformer.wte.weight"), std::string::npos) << inspect.output;
  // The straight tp2 x pp2 run against 10 steps there and 10 in one process from the conversion.
  fs::path straight = train("convert_straight", mpirun(4), settings);
  fs::copy_file(run / "metrics.jsonl", converted / "metrics.jsonl");  // steps 1-10, for the comparison
  fs::path resumed = train("converted_to_one", "", kSettings + " --set checkpoint.resume=true");
  testing::expect_close_runs(straight, resumed, kStep20, 1e-5, "converted tp2 x pp2 -> 1");
  testing::LaunchResult heads = testing::shell(std::string(STRATA_EXECUTABLE) + " ckpt convert " + run.string() + " " +
                                               (root() / "never").string() + " --layout tp=3");
  EXPECT_NE(heads.exit_code, 0);
  EXPECT_NE(heads.output.find("tp = 3 does not divide the model's 4 heads"), std::string::npos) << heads.output;
}

// The single-process checkpoints of earlier builds (manifest version 1: model.safetensors and
// optimizer.safetensors, every tensor whole) resume in a parallel layout too.
TEST_F(CheckpointReshard, AVersionOneCheckpointResumesInAnotherLayout) {
  fs::path straight = train("v1_straight", "", kSettings);
  fs::path run = train("v1_resumed", "", kSettings + " --set train.exit_at_step=10");
  const fs::path step = run / "step_00000010";
  {
    const Checkpoint current(step);
    std::map<std::string, TensorMap> files;
    for (const auto& [name, tensor] : testing::checkpoint_tensors(step)) {
      files[name.starts_with("exp_avg") ? "optimizer.safetensors" : "model.safetensors"][name] = tensor;
    }
    nlohmann::json manifest = {{"format", "strata-checkpoint"}, {"version", 1}, {"step", 10},
                               {"files", {"model.safetensors", "optimizer.safetensors"}}, {"metadata", current.metadata()}};
    manifest["metadata"].erase("layout");
    for (const auto& [file, tensors] : files) write_safetensors(step / file, tensors);
    for (const std::string& file : current.files()) fs::remove(step / file);
    for (const auto& [file, tensors] : files) manifest["file_bytes"][file] = fs::file_size(step / file);
    std::ofstream(step / "checkpoint.json") << manifest.dump();
  }
  fs::path resumed = train("v1_resumed", mpirun(2), kSettings + " --set checkpoint.resume=true");
  testing::expect_close_runs(straight, resumed, kStep20, 1e-5, "version 1 -> dp2");
}

}  // namespace
}  // namespace strata
