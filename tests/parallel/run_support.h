#pragma once
// Launching `strata train` (one process, or ranks under mpirun) from tests and
// reading what a run left: metrics.jsonl, checkpoint files, parameters.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "support/tiny_corpus.h"

namespace strata::testing {

struct LaunchResult {
  int exit_code;
  std::string output;
};

// Every launch is bounded: a rank that hangs fails the test instead of CI.
inline LaunchResult shell(const std::string& command) {
  FILE* pipe = popen(("timeout --kill-after=10 180 " + command + " 2>&1").c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t read = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, read);
  int status = pclose(pipe);
  return {WEXITSTATUS(status), output};
}

inline std::string mpirun(int ranks) {
  return std::string(STRATA_MPIRUN) + " --allow-run-as-root --oversubscribe --bind-to none -np " +
         std::to_string(ranks) + " ";
}

inline std::vector<nlohmann::json> read_metrics(const std::filesystem::path& run_dir) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

inline std::string file_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every global tensor of a checkpoint directory (parameters, and with `moments` AdamW's too),
// assembled from its pieces by the checkpoint reader: comparable across layouts.
inline TensorMap checkpoint_tensors(const std::filesystem::path& dir, bool moments = true) {
  Checkpoint checkpoint(dir);
  TensorMap tensors;
  for (const auto& [name, stored] : checkpoint.tensors()) {
    if (!moments && name.starts_with("exp_avg")) continue;
    Tensor tensor = Tensor::empty(stored.shape, stored.dtype);
    checkpoint.read(name, tensor);
    tensors[name] = tensor;
  }
  return tensors;
}

// The two checkpoints hold the same global tensors, bit for bit.
inline void expect_same_tensors(const std::filesystem::path& a, const std::filesystem::path& b,
                                const std::string& what, bool moments = true) {
  const TensorMap left = checkpoint_tensors(a, moments), right = checkpoint_tensors(b, moments);
  ASSERT_EQ(left.size(), right.size()) << what;
  for (const auto& [name, tensor] : left) {
    ASSERT_TRUE(right.count(name)) << what << ": " << name << " is missing";
    const Tensor& other = right.at(name);
    EXPECT_TRUE(tensor.shape() == other.shape() && std::memcmp(tensor.raw(), other.raw(), tensor.nbytes()) == 0)
        << what << ": " << name << " differs";
  }
}

// Two runs that must be the same bits: every step's loss, gradient norm and validation loss in
// metrics.jsonl, and the checkpoint in `step_dir` (parameters and AdamW moments).
inline void expect_identical_runs(const std::filesystem::path& a, const std::filesystem::path& b,
                                  const std::string& step_dir, const std::string& what = "") {
  std::vector<nlohmann::json> ma = read_metrics(a), mb = read_metrics(b);
  ASSERT_EQ(ma.size(), mb.size()) << what;
  for (size_t i = 0; i < ma.size(); ++i) {
    for (const char* key : {"loss", "grad_norm", "val_loss"}) {
      if (ma[i].contains(key)) {
        EXPECT_EQ(ma[i][key].dump(), mb[i][key].dump()) << what << ", " << key << " at line " << i;
      }
    }
  }
  expect_same_tensors(a / step_dir, b / step_dir, what);
}

// Every step's loss and validation loss of `got` within `tolerance` relative of `want`'s.
inline void expect_losses_close(const std::filesystem::path& want, const std::filesystem::path& got, double tolerance,
                                const std::string& what) {
  std::vector<nlohmann::json> expected = read_metrics(want), measured = read_metrics(got);
  ASSERT_EQ(expected.size(), measured.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    for (const char* key : {"loss", "val_loss"}) {
      if (!expected[i].contains(key)) continue;
      double a = expected[i][key], b = measured[i][key];
      EXPECT_LE(std::abs(a - b), tolerance * std::abs(a)) << what << ", " << key << " at step " << i + 1;
    }
  }
}

// fp16 runs of 3 steps whose loss scale overflows at the start: `got` skips the same steps as
// `single` (the first among them) with the same losses, and saves the same parameters.
inline void expect_same_overflow_skips(const std::filesystem::path& single, const std::filesystem::path& got) {
  std::vector<nlohmann::json> expected = read_metrics(single), measured = read_metrics(got);
  ASSERT_EQ(measured.size(), 3u);
  EXPECT_TRUE(measured[0].value("skipped", false)) << measured[0].dump();
  for (size_t i = 0; i < measured.size(); ++i) {
    EXPECT_EQ(measured[i].value("skipped", false), expected[i].value("skipped", false)) << "step " << i + 1;
    EXPECT_EQ(measured[i]["loss"].dump(), expected[i]["loss"].dump()) << "step " << i + 1;
  }
  expect_same_tensors(single / "step_00000003", got / "step_00000003", "fp16 overflow skips", /*moments=*/false);
}

// A suite of `strata train` runs: one temporary root holding a tiny corpus and
// the suite's config (20 steps of a 2-layer model whose [model] section the
// suite gives), each run in its own directory under it.
class TrainRunSuite : public ::testing::Test {
 protected:
  static void set_up_suite(const std::string& suite, const std::string& model_section) {
    root_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                      ("strata_" + suite + "_" + std::to_string(::getpid())));
    std::filesystem::path data = prepare_tiny_corpus(*root_, 600);
    std::ofstream config(*root_ / "tiny.toml");
    config << "[model]\n" << model_section << "[data]\ndir = \"" << data.string() << "\"\n"
           << "[ops]\nthreads = 1\n"
           << "[train]\nsteps = 20\nwarmup_steps = 3\nlr = 3e-3\nlr_min = 3e-4\ngrad_clip = 0.5\n"
           << "val_every = 10\nval_batches = 3\n"
           << "[checkpoint]\nevery = 0\nresume = false\n";
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*root_);
    delete root_;
    root_ = nullptr;
  }

  // `launcher` is "" (one process) or mpirun(N); returns the run directory.
  std::filesystem::path train(const std::string& name, const std::string& launcher, const std::string& settings) {
    std::filesystem::path run_dir = *root_ / name;
    LaunchResult run = shell(launcher + STRATA_EXECUTABLE + " train " + config() + " --set checkpoint.dir=" +
                             run_dir.string() + " " + settings);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    last_output_ = run.output;
    return run_dir;
  }

  // A new run directory `name` holding `straight` as it stood after step 10 (its checkpoint,
  // `latest` and the first 10 lines of metrics.jsonl), to resume from.
  static std::filesystem::path copy_after_step_10(const std::filesystem::path& straight, const std::string& name) {
    std::filesystem::path resumed = *root_ / name;
    std::filesystem::create_directories(resumed);
    std::filesystem::copy(straight / "step_00000010", resumed / "step_00000010",
                          std::filesystem::copy_options::recursive);
    std::ofstream(resumed / "latest") << "step_00000010";
    std::vector<nlohmann::json> lines = read_metrics(straight);
    std::ofstream log(resumed / "metrics.jsonl");
    for (size_t i = 0; i < 10 && i < lines.size(); ++i) log << lines[i].dump() << "\n";
    return resumed;
  }

  static std::string config() { return (*root_ / "tiny.toml").string(); }
  static const std::filesystem::path& root() { return *root_; }

  std::string last_output_;  // of the latest train()

 private:
  static inline std::filesystem::path* root_ = nullptr;
};

// Largest |want - got| and largest |want| over elements [begin, end).
inline std::pair<double, double> worst_and_largest(const Tensor& want, const Tensor& got, int64_t begin, int64_t end) {
  double worst = 0, largest = 0;
  for (int64_t i = begin; i < end; ++i) {
    largest = std::max(largest, std::abs(double(want.data<float>()[i])));
    worst = std::max(worst, std::abs(double(want.data<float>()[i]) - double(got.data<float>()[i])));
  }
  return {worst, largest};
}

// Every tensor of `got` within `tolerance` of the largest value of the same tensor in `want`.
// One exception, checked for what it is: the key part of c_attn's bias has an exactly zero
// gradient (adding a constant to every key leaves each softmax row unchanged), so it holds only
// Adam's normalised rounding noise, which any other summation order changes. It must stay at
// noise level in both runs.
inline void expect_parameters_close(const std::filesystem::path& want_dir, const std::filesystem::path& got_dir,
                                    double tolerance, const std::string& what) {
  TensorMap reference = checkpoint_tensors(want_dir, /*moments=*/false);
  TensorMap got = checkpoint_tensors(got_dir, /*moments=*/false);
  ASSERT_EQ(reference.size(), got.size()) << what;
  for (const auto& [name, tensor] : got) {
    const Tensor& want = reference.at(name);
    const int64_t n = want.numel();
    if (name.ends_with("attn.c_attn.bias")) {
      const int64_t c = n / 3;
      for (int64_t begin : {int64_t{0}, 2 * c}) {  // queries, values
        auto [worst, largest] = worst_and_largest(want, tensor, begin, begin + c);
        EXPECT_LE(worst, tolerance * largest) << what << ", " << name << " from " << begin;
      }
      double query_scale = worst_and_largest(want, tensor, 0, c).second;
      Tensor zero = Tensor::zeros(want.shape(), DType::F32);
      for (const Tensor* run : {&want, &tensor}) {
        EXPECT_LE(worst_and_largest(zero, *run, c, 2 * c).first, 1e-3 * query_scale) << what << ", " << name << " keys";
      }
      continue;
    }
    auto [worst, largest] = worst_and_largest(want, tensor, 0, n);
    EXPECT_LE(worst, tolerance * largest) << what << ", " << name;
  }
}

// Runs that must agree to rounding: losses within 1e-5 relative per step (the bound), and
// the parameters saved in `step_dir` within `parameter_tolerance` (expect_parameters_close).
inline void expect_close_runs(const std::filesystem::path& want, const std::filesystem::path& got,
                              const std::string& step_dir, double parameter_tolerance, const std::string& what) {
  expect_losses_close(want, got, 1e-5, what);
  expect_parameters_close(want / step_dir, got / step_dir, parameter_tolerance, what);
}

// Every step's router figures of `got` against `want`'s, present in both: the counts the same, the
// losses within `tolerance` relative (0: the same bits).
inline void expect_router_metrics(const std::filesystem::path& want, const std::filesystem::path& got, double tolerance,
                                  const std::string& what) {
  const std::vector<nlohmann::json> expected = read_metrics(want), measured = read_metrics(got);
  ASSERT_EQ(expected.size(), measured.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    for (const char* key : {"router_aux_loss", "router_z_loss", "expert_tokens_min", "expert_tokens_max",
                            "expert_tokens_mean", "expert_tokens_dropped"}) {
      ASSERT_TRUE(expected[i].contains(key) && measured[i].contains(key)) << what << ", " << key << " at line " << i;
      const double a = expected[i][key], b = measured[i][key];
      const bool count = std::string(key).starts_with("expert_tokens");
      EXPECT_LE(std::abs(a - b), count ? 0.0 : tolerance * std::abs(a)) << what << ", " << key << " at line " << i;
    }
  }
}

}  // namespace strata::testing
