// A save is never half-committed: two ranks (tensor-parallel, so each writes
// pieces of its own) save after every step, and one of them is killed with
// SIGKILL at a random moment, 20 times in a row, each trial resuming from
// where the last one died. After every kill the run directory's `latest`
// names a complete checkpoint that loads (index and files checked), a resume
// takes that one or a newer complete one, every checkpoint seen earlier is
// unchanged, and the next start removes the dead save's temporary directory.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "parallel/run_support.h"

extern char** environ;

namespace strata {
namespace {

namespace fs = std::filesystem;

class CheckpointCrash : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("checkpoint_crash", "n_layer = 2\nn_head = 4\nn_embd = 32\nvocab_size = 4099\nblock_size = 16\n");
  }
};

pid_t spawn(const std::string& command) {
  pid_t pid = 0;
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);  // its own group: killable as a whole
  posix_spawnattr_setpgroup(&attributes, 0);
  EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, &attributes, const_cast<char* const*>(argv), environ), 0);
  posix_spawnattr_destroy(&attributes);
  return pid;
}

pid_t parent_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t after_name = text.rfind(')');  // the name may hold spaces and parentheses
  if (after_name == std::string::npos) return 0;
  std::istringstream fields(text.substr(after_name + 2));
  std::string state;
  pid_t parent = 0;
  fields >> state >> parent;
  return parent;
}

// The job's `strata` processes: those named strata that descend from it.
std::vector<pid_t> ranks_of(pid_t job) {
  std::vector<pid_t> ranks;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm(entry.path() / "comm");
    std::string command;
    std::getline(comm, command);
    if (command != "strata") continue;
    const pid_t pid = std::stoi(name);
    for (pid_t ancestor = parent_of(pid); ancestor > 1; ancestor = parent_of(ancestor)) {
      if (ancestor == job) {
        ranks.push_back(pid);
        break;
      }
    }
  }
  return ranks;
}

size_t lines_in(const fs::path& file) {
  std::ifstream in(file);
  size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

TEST_F(CheckpointCrash, KillingARankAtRandomMomentsNeverBreaksLatestOrEarlierCheckpoints) {
  const fs::path run = root() / "killed";
  const std::string command = testing::mpirun(2) + STRATA_EXECUTABLE + " train " + config() +
                              " --set parallel.tp=2 --set train.steps=100000 --set train.warmup_steps=0 " +
                              "--set train.batch_size=2 --set train.global_batch=4 --set train.val_every=0 " +
                              "--set checkpoint.every=1 --set checkpoint.keep=0 --set checkpoint.resume=true " +
                              "--set checkpoint.dir=" + run.string() + " > " + (root() / "trial.log").string() + " 2>&1";
  std::mt19937 random(20261204);
  std::map<std::string, std::string> seen;  // "step dir/file" -> its bytes when first seen complete
  int inside_a_save = 0;
  for (int trial = 0; trial < 20; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const size_t lines_before = lines_in(run / "metrics.jsonl");
    const pid_t job = spawn(command);
    // Wait for a step past the resume (and, the first time, for the first checkpoint: a step's metrics
    // line comes before its save, and a kill before any save leaves nothing to check), then a random
    // moment within the next few steps.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((lines_in(run / "metrics.jsonl") <= lines_before || !fs::exists(run / "latest")) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 60000)(random)));
    std::vector<pid_t> ranks = ranks_of(job);
    ASSERT_FALSE(ranks.empty()) << testing::file_bytes(root() / "trial.log");
    ::kill(ranks[std::uniform_int_distribution<size_t>(0, ranks.size() - 1)(random)], SIGKILL);
    for (const auto& entry : fs::directory_iterator(run)) {
      if (entry.path().filename().string().starts_with(".step_")) ++inside_a_save;
    }
    // mpirun ends the other rank; if anything lingers, the whole group goes.
    int status = 0;
    const auto reaped_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (waitpid(job, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < reaped_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(-job, SIGKILL);
    waitpid(job, &status, 0);

    // `latest` names a complete checkpoint, and it loads.
    std::string named;
    std::getline(std::ifstream(run / "latest"), named);
    ASSERT_FALSE(named.empty());
    EXPECT_NO_THROW(Checkpoint{run / named}) << named;
    // A kill between a save's rename and its update of `latest` leaves `latest` one behind; a
    // resume then takes the newer complete one (checkpoint.h), never an older or broken one.
    EXPECT_GE(Checkpoint(resolve_checkpoint(run)).step(), Checkpoint(run / named).step());
    // Every complete checkpoint seen before is as it was.
    for (const auto& entry : fs::directory_iterator(run)) {
      const std::string dir = entry.path().filename().string();
      if (!dir.starts_with("step_")) continue;
      const Checkpoint checkpoint(entry.path());
      for (const std::string& file : checkpoint.files()) {
        const std::string bytes = testing::file_bytes(entry.path() / file);
        auto [known, fresh] = seen.emplace(dir + "/" + file, bytes);
        EXPECT_TRUE(fresh || known->second == bytes) << dir << "/" << file << " changed";
      }
    }
  }
  // A clean start removes what the dead saves left and carries on from `latest`.
  testing::LaunchResult finish = testing::shell(
      testing::mpirun(2) + STRATA_EXECUTABLE + " train " + config() + " --set parallel.tp=2 --set train.steps=100000 " +
      "--set train.warmup_steps=0 --set train.batch_size=2 --set train.global_batch=4 --set train.val_every=0 " +
      "--set checkpoint.every=1 --set checkpoint.keep=0 --set checkpoint.resume=true --set checkpoint.dir=" +
      run.string() + " --set train.exit_at_step=" + std::to_string(lines_in(run / "metrics.jsonl") + 1));
  EXPECT_EQ(finish.exit_code, 0) << finish.output;
  for (const auto& entry : fs::directory_iterator(run)) {
    EXPECT_FALSE(entry.path().filename().string().starts_with(".step_")) << entry.path();
  }
  std::cout << "20 ranks killed; " << inside_a_save << " of them while a save's temporary directory existed; "
            << seen.size() << " checkpoint files checked\n";
}

}  // namespace
}  // namespace strata
