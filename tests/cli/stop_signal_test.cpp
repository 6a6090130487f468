// Preemption: SIGTERM (as schedulers send before a kill) or SIGINT stops a run
// after the current step with a checkpoint of it and exit status 128 + signal;
// resuming from it continues bit-identically. A second signal ends at once.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "run_strata.h"
#include "support/tiny_corpus.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class StopSignal : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("strata_signal_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    data_ = testing::prepare_tiny_corpus(root_, 300);
    // A constant learning rate: the schedule does not depend on train.steps, so a run stopped
    // early and resumed with fewer total steps follows the same trajectory as a straight one.
    std::ofstream(root_ / "tiny.toml")
        << "[model]\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 320\nblock_size = 16\n"
        << "[data]\ndir = \"" << data_.string() << "\"\n[ops]\nthreads = 1\n"
        << "[train]\nbatch_size = 2\nglobal_batch = 4\nlr = 1e-3\nlr_min = 1e-3\nwarmup_steps = 0\n"
        << "val_every = 0\n[checkpoint]\nevery = 0\n";
  }
  void TearDown() override { fs::remove_all(root_); }

  // Starts `strata train` with its output in `log`; returns the pid.
  pid_t start(const std::vector<std::string>& arguments, const fs::path& log) {
    pid_t child = ::fork();
    if (child == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      std::vector<char*> argv;
      for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    return child;
  }

  static int lines_of(const fs::path& file) {
    std::ifstream in(file);
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    return lines;
  }

  // Waits (at most 60 s) until `file` has `lines` lines.
  static bool wait_for_lines(const fs::path& file, int lines) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (lines_of(file) < lines) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  // Exit status of `pid`, waiting at most 60 s (then killing it: a failed test, never a hang).
  static int exit_status(pid_t pid) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::vector<std::string> train(const std::string& run, int steps) const {
    return {STRATA_EXECUTABLE, "train", (root_ / "tiny.toml").string(), "--set",
            "checkpoint.dir=" + (root_ / run).string(), "--set", "train.steps=" + std::to_string(steps)};
  }

  static std::string read(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  fs::path root_, data_;
};

TEST_F(StopSignal, SigtermSavesTheCurrentStepAndResumingContinuesBitIdentically) {
  const fs::path run = root_ / "stopped";
  pid_t pid = start(train("stopped", 100000), root_ / "stopped.log");
  ASSERT_TRUE(wait_for_lines(run / "metrics.jsonl", 3)) << read(root_ / "stopped.log");
  ::kill(pid, SIGTERM);
  EXPECT_EQ(exit_status(pid), 128 + SIGTERM) << read(root_ / "stopped.log");
  const int stopped_at = lines_of(run / "metrics.jsonl");
  const std::string checkpoint = "step_" + std::string(8 - std::to_string(stopped_at).size(), '0') +
                                 std::to_string(stopped_at);
  EXPECT_TRUE(fs::exists(run / checkpoint / "rank_00000.safetensors")) << read(root_ / "stopped.log");
  EXPECT_NE(read(root_ / "stopped.log").find("stopped by Terminated after step " + std::to_string(stopped_at)),
            std::string::npos)
      << read(root_ / "stopped.log");

  const int total = stopped_at + 2;
  EXPECT_EQ(exit_status(start(train("stopped", total), root_ / "resumed.log")), 0) << read(root_ / "resumed.log");
  EXPECT_EQ(exit_status(start(train("straight", total), root_ / "straight.log")), 0) << read(root_ / "straight.log");
  const std::string last = "step_" + std::string(8 - std::to_string(total).size(), '0') + std::to_string(total);
  // One process writes every tensor, parameters and moments, to its rank file.
  EXPECT_TRUE(read(run / last / "rank_00000.safetensors") ==
              read(root_ / "straight" / last / "rank_00000.safetensors"));
}

TEST_F(StopSignal, ASecondSignalEndsTheRunAtOnce) {
  // A model large enough that one step takes far longer than the two signals' gap.
  pid_t pid = start({STRATA_EXECUTABLE, "train", (root_ / "tiny.toml").string(), "--set",
                     "checkpoint.dir=" + (root_ / "twice").string(), "--set", "train.steps=100000", "--set",
                     "model.n_embd=512", "--set", "model.n_layer=8", "--set", "model.block_size=64", "--set",
                     "train.batch_size=4", "--set", "train.global_batch=64"},
                    root_ / "twice.log");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read(root_ / "twice.log").find("backend:") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(pid, SIGINT);
  EXPECT_EQ(exit_status(pid), 128 + SIGINT) << read(root_ / "twice.log");
  EXPECT_FALSE(fs::exists(root_ / "twice" / "step_00000001")) << read(root_ / "twice.log");
}

}  // namespace
}  // namespace strata
