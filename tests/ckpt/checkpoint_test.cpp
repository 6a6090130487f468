// Checkpoint directories: layout, the `latest` pointer, retention, loading
// checks, and that a failure mid-save leaves the previous checkpoint alone.
#include "ckpt/checkpoint.h"

#include <functional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>


#include "file_size_limit.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::FileSizeLimit;
using testing::list_names;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

using testing::error_of;

Tensor filled(const Shape& shape, float start) {
  Tensor tensor = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < tensor.numel(); ++i) tensor.data<float>()[i] = start + static_cast<float>(i);
  return tensor;
}

CheckpointFiles sample_files(float start) {
  CheckpointFiles files;
  files["model.safetensors"]["w"] = filled({2, 3}, start);
  files["model.safetensors"]["b"] = filled({3}, start + 100);
  files["optimizer.safetensors"]["m.w"] = filled({2, 3}, start + 200);
  return files;
}

void expect_same_values(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.shape(), expected.shape());
  ASSERT_EQ(actual.dtype(), expected.dtype());
  for (int64_t i = 0; i < expected.numel(); ++i) EXPECT_EQ(actual.data<float>()[i], expected.data<float>()[i]);
}

TEST(Checkpoint, SavesADirectoryAndPointsLatestAtIt) {
  TempDir run;
  nlohmann::json metadata = {{"loader", {{"shard", 1}, {"offset", 640}}}};
  fs::path dir = save_checkpoint(run.path(), 10, sample_files(0), metadata);

  EXPECT_EQ(dir, run / "step_00000010");
  EXPECT_THAT(list_names(run.path()), ElementsAre("latest", "step_00000010"));
  EXPECT_THAT(list_names(dir), ElementsAre("checkpoint.json", "model.safetensors", "optimizer.safetensors"));
  EXPECT_EQ(read_bytes(run / "latest"), "step_00000010\n");

  Checkpoint checkpoint(run.path());
  EXPECT_EQ(checkpoint.dir(), dir);
  EXPECT_EQ(checkpoint.step(), 10);
  EXPECT_EQ(checkpoint.metadata(), metadata);
  EXPECT_THAT(checkpoint.files(), ElementsAre("model.safetensors", "optimizer.safetensors"));
  TensorMap model = checkpoint.load("model.safetensors");
  expect_same_values(model.at("w"), filled({2, 3}, 0));
  expect_same_values(model.at("b"), filled({3}, 100));

  // The files are plain safetensors that any reader can open.
  expect_same_values(read_safetensors(dir / "optimizer.safetensors").at("m.w"), filled({2, 3}, 200));
}

TEST(Checkpoint, ResolvesRunAndCheckpointDirectories) {
  TempDir run;
  save_checkpoint(run.path(), 1, sample_files(0), {});
  fs::path second = save_checkpoint(run.path(), 2, sample_files(10), {});
  EXPECT_EQ(resolve_checkpoint(run.path()), second);
  EXPECT_EQ(resolve_checkpoint(run / "step_00000001"), run / "step_00000001");
  EXPECT_EQ(Checkpoint(run / "step_00000001").step(), 1);

  std::string missing = (run / "nothing_here").string();
  EXPECT_THAT(error_of([&] { resolve_checkpoint(missing); }), HasSubstr(missing));

  fs::create_directory(run / "empty");
  std::string message = error_of([&] { resolve_checkpoint(run / "empty"); });
  EXPECT_THAT(message, HasSubstr((run / "empty").string()));
  EXPECT_THAT(message, HasSubstr("neither a checkpoint directory"));

  // `latest` naming nothing (damaged) or a path outside: the newest complete checkpoint is used.
  write_bytes(run / "latest", "step_00000099\n");
  EXPECT_EQ(resolve_checkpoint(run.path()), second);
  write_bytes(run / "latest", "../elsewhere\n");
  EXPECT_EQ(resolve_checkpoint(run.path()), second);
}

// A save killed between the rename of its directory and the update of `latest` left `latest`
// one behind: resuming from it would later stop at "step already exists" forever. The newest
// complete checkpoint wins; one whose files are missing or truncated is passed over, named.
TEST(Checkpoint, ResumeTakesTheNewestCompleteCheckpointWhateverLatestSays) {
  TempDir run;
  fs::path first = save_checkpoint(run.path(), 1, sample_files(0), {});
  save_checkpoint(run.path(), 2, sample_files(10), {});
  write_bytes(run / "latest", "step_00000001\n");  // the crash point
  EXPECT_EQ(resolve_checkpoint(run.path()), run / "step_00000002");

  fs::resize_file(run / "step_00000002" / "optimizer.safetensors", 10);  // damaged after the fact
  EXPECT_EQ(resolve_checkpoint(run.path()), first);
  fs::remove(run / "step_00000001" / "model.safetensors");
  std::string message = error_of([&] { resolve_checkpoint(run.path()); });
  EXPECT_THAT(message, HasSubstr("holds no complete checkpoint"));
  EXPECT_THAT(message, HasSubstr("optimizer.safetensors' has 10 bytes, the manifest says"));
  EXPECT_THAT(message, HasSubstr("model.safetensors' is missing"));
}

// Resumed from step 1, the run reaches step 2 again and saves it: the new directory replaces
// the old one atomically instead of failing.
TEST(Checkpoint, SavingAStepThatExistsReplacesIt) {
  TempDir run;
  save_checkpoint(run.path(), 1, sample_files(0), {});
  save_checkpoint(run.path(), 2, sample_files(10), {});
  save_checkpoint(run.path(), 2, sample_files(20), {{"again", true}});
  EXPECT_THAT(list_names(run.path()), ElementsAre("latest", "step_00000001", "step_00000002"));
  Checkpoint checkpoint(run.path());
  EXPECT_EQ(checkpoint.metadata(), nlohmann::json({{"again", true}}));
  expect_same_values(checkpoint.load("model.safetensors").at("w"), filled({2, 3}, 20));
}

// Killed mid-save, a save leaves its temporary directory; the next run removes them all.
TEST(Checkpoint, StaleTemporariesOfDeadSavesAreRemoved) {
  TempDir run;
  save_checkpoint(run.path(), 1, sample_files(0), {});
  fs::create_directories(run / ".step_00000002.tmp.AbC123" / "junk");
  fs::create_directories(run / ".step_00000003.tmp.XyZ789");
  write_bytes(run / "notes.txt", "kept");
  remove_stale_temporaries(run.path());
  EXPECT_THAT(list_names(run.path()), ElementsAre("latest", "notes.txt", "step_00000001"));
}

TEST(Checkpoint, KeepsOnlyTheLastCheckpointsWhenAsked) {
  TempDir run;
  for (int64_t step : {100, 200, 300, 400}) save_checkpoint(run.path(), step, sample_files(0), {}, 2);
  EXPECT_THAT(list_names(run.path()), ElementsAre("latest", "step_00000300", "step_00000400"));
  // Without retention nothing is deleted.
  save_checkpoint(run.path(), 500, sample_files(0), {});
  EXPECT_THAT(list_names(run.path()), ElementsAre("latest", "step_00000300", "step_00000400", "step_00000500"));
}

// After a failed save the run directory must hold exactly what it held before.
void expect_run_unchanged(const TempDir& run, const std::vector<std::string>& names_before) {
  EXPECT_EQ(list_names(run.path()), names_before);
  EXPECT_EQ(read_bytes(run / "latest"), "step_00000001\n");
  Checkpoint checkpoint(run.path());
  EXPECT_EQ(checkpoint.step(), 1);
  expect_same_values(checkpoint.load("model.safetensors").at("w"), filled({2, 3}, 0));
}

TEST(Checkpoint, AFailureMidSaveLeavesThePreviousCheckpointAlone) {
  TempDir run;
  save_checkpoint(run.path(), 1, sample_files(0), {{"step", 1}});
  std::vector<std::string> before = list_names(run.path());

  // The first file is written before the second one turns out to be invalid.
  CheckpointFiles files = sample_files(5);
  files["z_broken.safetensors"]["ghost"] = Tensor();
  std::string message = error_of([&] { save_checkpoint(run.path(), 2, files, {}); });
  EXPECT_THAT(message, HasSubstr("z_broken.safetensors"));
  EXPECT_THAT(message, HasSubstr("'ghost'"));
  expect_run_unchanged(run, before);
}

TEST(Checkpoint, ADiskErrorMidSaveLeavesThePreviousCheckpointAlone) {
  TempDir run;
  save_checkpoint(run.path(), 1, sample_files(0), {});
  std::vector<std::string> before = list_names(run.path());

  CheckpointFiles files = sample_files(5);
  files["model.safetensors"]["big"] = Tensor::zeros({64 * 1024}, DType::F32);  // 256 KiB
  std::string message;
  {
    FileSizeLimit limit(64 * 1024);
    message = error_of([&] { save_checkpoint(run.path(), 2, files, {}); });
  }
  EXPECT_THAT(message, HasSubstr("model.safetensors"));
  EXPECT_THAT(message, HasSubstr("File too large"));
  expect_run_unchanged(run, before);
}

TEST(Checkpoint, AnUnwritableRunDirectoryIsNamed) {
  TempDir scratch;
  write_bytes(scratch / "a_file", "not a directory");
  fs::path run = scratch / "a_file" / "run";
  std::string message = error_of([&] { save_checkpoint(run, 1, sample_files(0), {}); });
  EXPECT_THAT(message, HasSubstr(run.string()));
}

TEST(Checkpoint, RefusesUnsafeFileNames) {
  TempDir run;
  save_checkpoint(run.path(), 3, sample_files(0), {});
  for (const char* name : {"../escape.safetensors", ".hidden", "checkpoint.json", "sub/dir.safetensors", ""}) {
    SCOPED_TRACE(name);
    CheckpointFiles files{{name, {{"x", filled({1}, 0)}}}};
    EXPECT_THAT(error_of([&] { save_checkpoint(run.path(), 4, files, {}); }), HasSubstr("not allowed as a file name"));
  }
  EXPECT_THAT(list_names(run.path()), ElementsAre("latest", "step_00000003"));
}

TEST(Checkpoint, ReadsAnyBoxOfAGlobalTensorAndChecksNamesBoxesAndDtypes) {
  TempDir run;
  fs::path dir = save_checkpoint(run.path(), 7, sample_files(0), {});
  Checkpoint checkpoint(run.path());

  Tensor whole = Tensor::zeros({2, 3}, DType::F32);
  checkpoint.read("w", whole);
  expect_same_values(whole, filled({2, 3}, 0));
  // Column 1..2 of w (values 1, 2, 4, 5) into the middle of a 3 x 4 destination.
  Tensor destination = Tensor::zeros({3, 4}, DType::F32);
  checkpoint.read("w", {{0, 1}, {2, 2}}, destination, {1, 1});
  const std::vector<float> want = {0, 0, 0, 0, 0, 1, 2, 0, 0, 4, 5, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(destination.data<float>()[i], want[i]) << i;
  // All of w (one run in its file) into a strided place: read whole, then placed.
  Tensor wide = Tensor::zeros({3, 4}, DType::F32);
  checkpoint.read("w", {{0, 0}, {2, 3}}, wide, {1, 1});
  const std::vector<float> placed = {0, 0, 0, 0, 0, 0, 1, 2, 0, 3, 4, 5};
  for (size_t i = 0; i < placed.size(); ++i) EXPECT_EQ(wide.data<float>()[i], placed[i]) << i;

  EXPECT_THAT(error_of([&] { checkpoint.read("extra_param", whole); }), HasSubstr("no tensor 'extra_param'"));
  Tensor wrong_shape = Tensor::zeros({3, 2}, DType::F32);
  EXPECT_THAT(error_of([&] { checkpoint.read("w", wrong_shape); }), HasSubstr("'w' is [2, 3], expected [3, 2]"));
  Tensor wrong_dtype = Tensor::zeros({2, 3}, DType::BF16);
  EXPECT_THAT(error_of([&] { checkpoint.read("w", wrong_dtype); }), HasSubstr("'w' is F32, but it is loaded into BF16"));
  EXPECT_THAT(error_of([&] { checkpoint.read("w", {{1, 0}, {2, 3}}, destination, {0, 0}); }),
              HasSubstr("does not hold the box [1:3, 0:3]"));

  fs::remove(dir / "optimizer.safetensors");
  std::string message = error_of([&] { Checkpoint{dir}; });
  EXPECT_THAT(message, HasSubstr((dir / "optimizer.safetensors").string()));
}

// A checkpoint whose pieces are written by hand: `w` [4, 2] in two row halves, one per file.
fs::path two_piece_checkpoint(const fs::path& run, const std::function<void(nlohmann::json&)>& damage) {
  const fs::path temp = begin_checkpoint(run, 5);
  write_safetensors(temp / "rank_00000.safetensors", {{"w#0", filled({2, 2}, 0)}});
  write_safetensors(temp / "rank_00001.safetensors", {{"w#1", filled({2, 2}, 4)}});
  TensorIndex index{{"w", {{4, 2}, DType::F32, {{"rank_00000.safetensors", "w#0", {{0, 0}, {2, 2}}},
                                                 {"rank_00001.safetensors", "w#1", {{2, 0}, {2, 2}}}}}}};
  const std::vector<std::string> files = {"rank_00000.safetensors", "rank_00001.safetensors"};
  fs::path dir = commit_checkpoint(run, 5, files, index, {});
  nlohmann::json manifest = nlohmann::json::parse(read_bytes(dir / "checkpoint.json"));
  damage(manifest["tensors"]["w"]);
  write_bytes(dir / "checkpoint.json", manifest.dump());
  return dir;
}

TEST(Checkpoint, AssemblesPiecesAndRejectsAnIndexThatDisagreesWithItsFiles) {
  TempDir run;
  fs::path dir = two_piece_checkpoint(run.path(), [](nlohmann::json&) {});
  Tensor whole = Tensor::zeros({4, 2}, DType::F32);
  Checkpoint(dir).read("w", whole);
  expect_same_values(whole, filled({4, 2}, 0));
  // Rows 1..2 straddle the two pieces.
  Tensor middle = Tensor::zeros({2, 2}, DType::F32);
  Checkpoint(dir).read("w", {{1, 0}, {2, 2}}, middle, {0, 0});
  expect_same_values(middle, filled({2, 2}, 2));

  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> damages = {
      {[](nlohmann::json& w) { w["pieces"][1]["offsets"] = {1, 0}; }, "overlap"},
      {[](nlohmann::json& w) { w["pieces"].erase(1); }, "cover 4 of its 8 elements"},
      {[](nlohmann::json& w) { w["pieces"][1]["offsets"] = {3, 0}; }, "outside the tensor's [4, 2]"},
      {[](nlohmann::json& w) { w["pieces"][1]["key"] = "w#9"; }, "piece 'w#9' that the file does not hold"},
      {[](nlohmann::json& w) { w["dtype"] = "BF16"; }, "is F32 [2, 2], but the manifest says BF16 [2, 2]"},
      {[](nlohmann::json& w) { w["shape"] = {2, 4}; }, "outside the tensor's [2, 4]"},
      {[](nlohmann::json& w) { w["pieces"][0]["file"] = "rank_00007.safetensors"; }, "not one of the checkpoint's files"},
  };
  for (const auto& [damage, expected] : damages) {
    TempDir other;
    fs::path damaged = two_piece_checkpoint(other.path(), damage);
    std::string message = error_of([&] { Checkpoint{damaged}; });
    EXPECT_THAT(message, HasSubstr("'w'")) << expected;
    EXPECT_THAT(message, HasSubstr(expected));
  }
  TempDir missing;
  fs::path without_file = two_piece_checkpoint(missing.path(), [](nlohmann::json&) {});
  fs::remove(without_file / "rank_00001.safetensors");
  EXPECT_THAT(error_of([&] { Checkpoint{without_file}; }), HasSubstr("rank_00001.safetensors"));
}

TEST(Checkpoint, RejectsADamagedManifest) {
  TempDir run;
  fs::path dir = save_checkpoint(run.path(), 7, sample_files(0), {});
  write_bytes(dir / "checkpoint.json", "{\"format\": \"strata-checkpoint\", \"version\": 1}");
  std::string message = error_of([&] { Checkpoint checkpoint(dir); });
  EXPECT_THAT(message, HasSubstr((dir / "checkpoint.json").string()));
  EXPECT_THAT(message, HasSubstr("\"step\""));

  write_bytes(dir / "checkpoint.json", "{ truncated");
  EXPECT_THAT(error_of([&] { Checkpoint checkpoint(dir); }), HasSubstr("not valid JSON"));
}

}  // namespace
}  // namespace strata
