// Runs the real `strata` executable on bad input: each case must exit
// non-zero with one clear line naming the file, key or tensor, and must leave
// existing checkpoints untouched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "run_strata.h"
#include "support/test_files.h"
#include "support/tiny_corpus.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::run_strata;
using testing::StrataRun;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_cli_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name, std::ios::binary) << content;
    return (dir_ / name).string();
  }

  // A prepared tiny corpus and a config training on it.
  std::string prepared_config() {
    std::string text;
    for (int i = 0; i < 300; ++i) text += "And God said, Let there be light: and there was light " + std::to_string(i) + "\n";
    std::string corpus = write("corpus.txt", text);
    StrataRun prepared =
        run_strata("data prepare " + corpus + " --out " + (dir_ / "data").string() + " --vocab-size 400");
    EXPECT_EQ(prepared.exit_code, 0) << prepared.output;
    return write("job.toml", "[model]\nn_layer = 1\nn_head = 2\nn_embd = 16\nvocab_size = 420\nblock_size = 16\n"
                             "[data]\ndir = \"" + (dir_ / "data").string() + "\"\n"
                             "[train]\nbatch_size = 2\nglobal_batch = 2\nsteps = 2\nwarmup_steps = 1\nval_every = 0\n"
                             "[checkpoint]\ndir = \"" + (dir_ / "run").string() + "\"\n");
  }

  fs::path dir_;
};

// One source for what a backend emulates: the fp16 start-up line, the end-of-run table of ops not
// native and `strata ops` all come from the dispatcher's routes, so they name the same ops.
TEST_F(CliTest, Fp16StartUpLineAndTheOpsReportAgreeOnWhatIsEmulated) {
  std::string config = prepared_config();
  StrataRun trained = run_strata("train " + config + " --set precision.compute=fp16 --set ops.fallback=allow");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string prefix = "backend 'cpu' has no native arithmetic for ";
  size_t start = trained.output.find(prefix);
  ASSERT_NE(start, std::string::npos) << trained.output;
  start += prefix.size();
  std::string list = trained.output.substr(start, trained.output.find(": they run in f32", start) - start);
  std::set<std::string> at_start_up;
  for (size_t at = 0; at < list.size();) {
    size_t end = list.find(" (f16)", at);
    ASSERT_NE(end, std::string::npos) << list;
    at_start_up.insert(list.substr(at, end - at));
    at = end + std::string(" (f16)").size();
    if (list.compare(at, 2, ", ") == 0) at += 2;
  }
  ASSERT_FALSE(at_start_up.empty());

  StrataRun report = run_strata("ops --json --backend cpu --dtype fp16", false);
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const nlohmann::json routes = nlohmann::json::parse(report.output);
  std::set<std::string> emulated;
  for (const nlohmann::json& entry : routes["ops"]) {
    if (entry["routes"]["f16"]["route"] == "emulated") emulated.insert(entry["op"].get<std::string>());
  }
  std::set<std::string> in_the_table;
  std::istringstream lines(trained.output.substr(trained.output.find("ops not native on backend 'cpu':")));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string op, dtype, route;
    if (fields >> op >> dtype >> route && dtype == "f16" && route == "emulated") in_the_table.insert(op);
  }
  for (const std::string& op : at_start_up) EXPECT_TRUE(emulated.count(op)) << op << " is emulated at start-up only";
  EXPECT_EQ(in_the_table, at_start_up);
}

TEST_F(CliTest, MissingCorpusNamesTheFile) {
  StrataRun result =
      run_strata("data prepare " + (dir_ / "nowhere.txt").string() + " --out " + (dir_ / "out").string());
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.output, HasSubstr("nowhere.txt"));
}

TEST_F(CliTest, EmptyCorpusNamesTheFile) {
  std::string empty = write("empty.txt", "");
  StrataRun result = run_strata("data prepare " + empty + " --out " + (dir_ / "out").string());
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.output, HasSubstr("empty.txt"));
}

TEST_F(CliTest, UnknownConfigKeyIsNamed) {
  std::string config = write("bad.toml", "[train]\nlearning_rate = 1\n");
  StrataRun result = run_strata("train " + config);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("train.learning_rate"));
  EXPECT_THAT(result.output, HasSubstr("bad.toml"));
}

TEST_F(CliTest, BadOverrideIsNamed) {
  std::string config = write("ok.toml", "[train]\nsteps = 1\n");
  StrataRun result = run_strata("train " + config + " --set model.n_head=5");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("model.n_head"));
}

TEST_F(CliTest, TraceWritesATimelineAndBadTraceStepsAreNamed) {
  std::string config = prepared_config();
  StrataRun orphan = run_strata("train " + config + " --trace-steps 1:2");
  EXPECT_EQ(orphan.exit_code, 1);
  EXPECT_THAT(orphan.output, HasSubstr("--trace-steps needs --trace FILE"));
  const fs::path file = dir_ / "timeline.json";
  StrataRun backwards = run_strata("train " + config + " --trace " + file.string() + " --trace-steps 3:1");
  EXPECT_EQ(backwards.exit_code, 1);
  EXPECT_THAT(backwards.output, HasSubstr("--trace-steps '3:1'"));
  EXPECT_FALSE(fs::exists(dir_ / "run"));  // refused before training

  StrataRun traced = run_strata("train " + config + " --trace " + file.string() + " --trace-steps 2:");
  EXPECT_EQ(traced.exit_code, 0) << traced.output;
  EXPECT_THAT(traced.output, HasSubstr("gap analysis"));
  EXPECT_THAT(traced.output, HasSubstr("top ops by compute time"));
  std::ifstream in(file);
  nlohmann::json trace = nlohmann::json::parse(in);
  int steps = 0;
  for (const nlohmann::json& event : trace["traceEvents"]) steps += event.value("cat", "") == "step";
  EXPECT_EQ(steps, 1);  // step 2 of 2
  EXPECT_TRUE(fs::exists(dir_ / "timeline.gaps.json"));
}

TEST_F(CliTest, TrainsSamplesAndKeepsCheckpointsOnBadInput) {
  std::string config = prepared_config();
  StrataRun trained = run_strata("train " + config);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  fs::path checkpoint = resolve_checkpoint(dir_ / "run");
  StrataRun sampled =
      run_strata("sample " + (dir_ / "run").string() + " --prompt 'And God' --tokens 5 --temperature 0");
  EXPECT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_THAT(sampled.output, HasSubstr("And God"));

  // A token shard with a wrong magic number.
  fs::path shard = dir_ / "data" / "train_000.bin";
  fs::path saved_shard = dir_ / "train_000.bin.good";
  fs::copy_file(shard, saved_shard);
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    int32_t wrong = 12345;
    file.write(reinterpret_cast<const char*>(&wrong), sizeof(wrong));
  }
  StrataRun bad_magic = run_strata("train " + config + " --set train.steps=4");
  EXPECT_NE(bad_magic.exit_code, 0);
  EXPECT_THAT(bad_magic.output, HasSubstr("train_000.bin"));

  // A truncated shard body.
  fs::copy_file(saved_shard, shard, fs::copy_options::overwrite_existing);
  fs::resize_file(shard, fs::file_size(shard) - 3);
  StrataRun truncated = run_strata("train " + config + " --set train.steps=4");
  EXPECT_NE(truncated.exit_code, 0);
  EXPECT_THAT(truncated.output, HasSubstr("train_000.bin"));
  fs::copy_file(saved_shard, shard, fs::copy_options::overwrite_existing);

  // A checkpoint whose shapes do not match the config.
  StrataRun wider = run_strata("train " + config + " --set model.n_embd=32 --set train.steps=4");
  EXPECT_NE(wider.exit_code, 0);
  EXPECT_THAT(wider.output, HasSubstr("model.n_embd = 16 there, 32 here"));

  // A malformed safetensors header in the checkpoint being sampled from.
  fs::path copy = dir_ / "broken";
  fs::copy(checkpoint, copy);
  {
    std::ofstream file(copy / "rank_00000.safetensors", std::ios::binary | std::ios::trunc);
    uint64_t length = 1000;
    file.write(reinterpret_cast<const char*>(&length), sizeof(length));
    file << "{not json";
  }
  StrataRun malformed = run_strata("sample " + copy.string() + " --prompt 'And' --tokens 2");
  EXPECT_NE(malformed.exit_code, 0);
  EXPECT_THAT(malformed.output, HasSubstr("rank_00000.safetensors"));

  // An unwritable output directory (a file stands where it should be).
  write("blocker", "not a directory");
  StrataRun unwritable = run_strata("train " + config + " --set checkpoint.dir=" + (dir_ / "blocker" / "run").string());
  EXPECT_NE(unwritable.exit_code, 0);
  EXPECT_THAT(unwritable.output, HasSubstr("blocker"));

  // Through all of it the original checkpoint stayed the latest and intact.
  EXPECT_EQ(resolve_checkpoint(dir_ / "run"), checkpoint);
  EXPECT_EQ(Checkpoint(checkpoint).step(), 2);
  EXPECT_NO_THROW(read_safetensors(checkpoint / "rank_00000.safetensors"));
}

TEST_F(CliTest, SampleFromMissingCheckpointIsNamed) {
  StrataRun result = run_strata("sample " + (dir_ / "nothing").string() + " --prompt hi");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.output, HasSubstr("nothing"));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// The plain command works out of the box (it used to stop on a bf16 op the training graph runs
// in f32), and the planner reads what it writes.
TEST(CalibrateCommand, ThePlainCommandWritesAProfileThePlannerReads) {
  const fs::path profile = fs::temp_directory_path() / ("strata_calibrate_" + std::to_string(::getpid()) + ".toml");
  testing::StrataRun calibrated = testing::run_strata("calibrate --out " + profile.string() + " --threads 1 --budget 0.002");
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  EXPECT_THAT(calibrated.output, HasSubstr("wrote " + profile.string()));
  testing::StrataRun planned = testing::run_strata("plan gpt2-small " + profile.string() + " --dtype f32 --top 1 --devices 1");
  EXPECT_EQ(planned.exit_code, 0) << planned.output;
  fs::remove(profile);
}

// On a device the kernels are timed until the device has run them, and the planner reads the result.
TEST(CalibrateCommand, AnOpenCLDeviceIsMeasuredAndPlannedFor) {
  const fs::path profile = fs::temp_directory_path() / ("strata_calibrate_opencl_" + std::to_string(::getpid()) + ".toml");
  testing::StrataRun calibrated = testing::run_strata("calibrate --backend opencl --dtypes f32 --out " +
                                                      profile.string() + " --threads 1 --budget 0.002");
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  EXPECT_THAT(calibrated.output, HasSubstr("f32: GEMM up to"));
  testing::StrataRun planned = testing::run_strata("plan gpt2-small " + profile.string() + " --dtype f32 --top 1 --devices 1");
  EXPECT_EQ(planned.exit_code, 0) << planned.output;
  fs::remove(profile);
}

// `strata data tokenize` encodes standard input as the library does and decodes the ids back; a
// word that is not an id is an error naming it.
TEST(DataTokenizeCommand, EncodesAsTheLibraryAndDecodesBack) {
  testing::TempDir dir;
  const fs::path data = testing::prepare_tiny_corpus(dir.path(), 200);
  const fs::path tokenizer = data / "tokenizer.model";
  const std::string text = "And the LORD said unto Moses,\n  Go in.";
  testing::write_bytes(dir / "text.txt", text);
  const testing::StrataRun encoded =
      testing::run_strata("data tokenize --tokenizer " + tokenizer.string() + " < " + (dir / "text.txt").string(), false);
  ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
  EXPECT_EQ(encoded.output, fmt::format("{}\n", fmt::join(load_tokenizer(tokenizer).encode(text), " ")));
  testing::write_bytes(dir / "ids.txt", encoded.output);
  const testing::StrataRun decoded = testing::run_strata(
      "data tokenize --decode --tokenizer " + tokenizer.string() + " < " + (dir / "ids.txt").string(), false);
  ASSERT_EQ(decoded.exit_code, 0) << decoded.output;
  EXPECT_EQ(decoded.output, text);
  testing::write_bytes(dir / "bad.txt", "5 7 x9 2");
  const testing::StrataRun bad =
      testing::run_strata("data tokenize --decode --tokenizer " + tokenizer.string() + " < " + (dir / "bad.txt").string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output, HasSubstr("item 3 of standard input is \"x9\""));
}

}  // namespace
}  // namespace strata
