// Checkpoint directories: layout, the `latest` pointer, retention, loading
// checks, and that a failure mid-save leaves the previous checkpoint alone.
#include "ckpt/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>


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

TEST(Checkpoint, LoadIntoChecksNamesShapesAndDtypes) {
  TempDir run;
  fs::path dir = save_checkpoint(run.path(), 7, sample_files(0), {});
  Checkpoint checkpoint(run.path());
  const std::string model_file = (dir / "model.safetensors").string();

  TensorMap targets{{"w", Tensor::zeros({2, 3}, DType::F32)}, {"b", Tensor::zeros({3}, DType::F32)}};
  checkpoint.load_into("model.safetensors", targets);
  expect_same_values(targets.at("w"), filled({2, 3}, 0));
  expect_same_values(targets.at("b"), filled({3}, 100));

  TensorMap missing{{"w", Tensor::zeros({2, 3}, DType::F32)}, {"b", Tensor::zeros({3}, DType::F32)},
                    {"extra_param", Tensor::zeros({1}, DType::F32)}};
  std::string message = error_of([&] { checkpoint.load_into("model.safetensors", missing); });
  EXPECT_THAT(message, HasSubstr(model_file));
  EXPECT_THAT(message, HasSubstr("'extra_param' is missing"));

  TensorMap unexpected{{"w", Tensor::zeros({2, 3}, DType::F32)}};
  message = error_of([&] { checkpoint.load_into("model.safetensors", unexpected); });
  EXPECT_THAT(message, HasSubstr("'b' is not expected"));

  TensorMap wrong_shape{{"w", Tensor::zeros({3, 2}, DType::F32)}, {"b", Tensor::zeros({3}, DType::F32)}};
  message = error_of([&] { checkpoint.load_into("model.safetensors", wrong_shape); });
  EXPECT_THAT(message, HasSubstr("'w' is F32 [2, 3], expected F32 [3, 2]"));

  TensorMap wrong_dtype{{"w", Tensor::zeros({2, 3}, DType::BF16)}, {"b", Tensor::zeros({3}, DType::F32)}};
  message = error_of([&] { checkpoint.load_into("model.safetensors", wrong_dtype); });
  EXPECT_THAT(message, HasSubstr("'w' is F32 [2, 3], expected BF16 [2, 3]"));

  message = error_of([&] { checkpoint.load("no_such.safetensors"); });
  EXPECT_THAT(message, HasSubstr("no file 'no_such.safetensors'"));

  fs::remove(dir / "optimizer.safetensors");
  message = error_of([&] { checkpoint.load("optimizer.safetensors"); });
  EXPECT_THAT(message, HasSubstr((dir / "optimizer.safetensors").string()));
  EXPECT_THAT(message, HasSubstr("missing"));
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
