// Every layout's exact bits, pinned: each run's per-step losses, gradient norms and validation
// losses, and a checksum of its last checkpoint (parameters and AdamW moments, assembled), compared
// with the values in layout_fingerprints.json, recorded before the parallel runtime was reorganised
// into named dimensions. A refactor that changes no behaviour changes none of these bits.
//
// Bits are a property of the kernels a CPU runs (oneDNN picks them by instruction set), so the
// file keeps one recording per CPU signature; on a CPU with none the test is skipped, saying so.
// (The AVX-512 CPUs' recordings were dropped when the backends began compiling with
// -fno-trapping-math, which moved the bits of some scalar loop tails there: record them again on such a CPU.)
// To record this CPU's (replacing only its own entry; only when a change is meant to move bits, or
// for a CPU not yet recorded, said in the commit):
//   STRATA_RECORD_FINGERPRINTS=tests/parallel/layout_fingerprints.json ctest -R LayoutFingerprint
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/run_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::mpirun;

const std::string kSettings =
    "--set train.steps=6 --set train.val_every=3 --set train.batch_size=2 --set train.global_batch=8 "
    "--set checkpoint.every=3 --set checkpoint.keep=0";
const std::string kLlama =
    " --set model.family=llama --set model.n_kv_head=2 --set model.intermediate_size=48"
    " --set model.tie_word_embeddings=false";
const std::string kLastStep = "step_00000006";

const fs::path kRecorded = fs::path(STRATA_SOURCE_DIR) / "tests/parallel/layout_fingerprints.json";

// The CPU's name and the instruction-set extensions oneDNN chooses kernels by.
std::string cpu_signature() {
  std::ifstream in("/proc/cpuinfo");
  std::string model, flags;
  for (std::string line; std::getline(in, line);) {
    if (model.empty() && line.starts_with("model name")) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.starts_with("flags")) flags = fmt::format(" {} ", line.substr(line.find(':') + 2));
  }
  std::string signature = model;
  for (const char* extension : {"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni", "amx_tile",
                                "amx_bf16", "avx_vnni"}) {
    if (flags.find(fmt::format(" {} ", extension)) != std::string::npos) signature += fmt::format(" {}", extension);
  }
  return signature;
}

// FNV-1a over every global tensor's name and bytes, in name order.
std::string checkpoint_checksum(const fs::path& dir) {
  uint64_t hash = 14695981039346656037ull;
  auto mix = [&hash](const void* data, size_t size) {
    for (size_t i = 0; i < size; ++i) hash = (hash ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
  };
  for (const auto& [name, tensor] : testing::checkpoint_tensors(dir)) {
    mix(name.data(), name.size());
    mix(tensor.raw(), tensor.nbytes());
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

nlohmann::json fingerprint(const fs::path& run_dir) {
  nlohmann::json steps = nlohmann::json::array();
  for (const nlohmann::json& line : testing::read_metrics(run_dir)) {
    nlohmann::json step;
    for (const char* key : {"step", "loss", "grad_norm", "val_loss", "skipped"}) {
      if (line.contains(key)) step[key] = line[key].dump();
    }
    steps.push_back(step);
  }
  return {{"metrics", steps}, {"checkpoint", checkpoint_checksum(run_dir / kLastStep)}};
}

class LayoutFingerprint : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("layout_fingerprint", "n_layer = 4\nn_head = 4\nn_embd = 32\nvocab_size = 4099\nblock_size = 16\n");
  }
};

TEST_F(LayoutFingerprint, EveryLayoutResumeAndReshardGivesTheRecordedBits) {
  const char* record_to = std::getenv("STRATA_RECORD_FINGERPRINTS");
  const fs::path recordings_file = record_to ? fs::path(record_to) : kRecorded;
  nlohmann::json recordings = {{"cpus", nlohmann::json::object()}};
  if (std::ifstream in(recordings_file); in) {
    recordings = nlohmann::json::parse(in);
  } else {
    ASSERT_TRUE(record_to) << recordings_file << " is missing";
  }
  const std::string cpu = cpu_signature();
  nlohmann::json recorded;
  if (!record_to) {
    if (!recordings["cpus"].contains(cpu)) {
      std::string known;
      for (const auto& [signature, unused] : recordings["cpus"].items()) known += fmt::format(" '{}'", signature);
      GTEST_SKIP() << "fingerprints were recorded on" << known << "; this CPU is '" << cpu
                   << "', whose kernels give other bits";
    }
    recorded = recordings["cpus"][cpu];
  }

  // name, ranks, settings: every layout and schedule, both families, both precisions' weight copies.
  const std::vector<std::tuple<std::string, int, std::string>> layouts = {
      {"single", 1, ""},
      {"dp2", 2, "--set parallel.dp=2"},
      {"dp2_zero1", 2, "--set parallel.zero=1"},
      {"dp2_zero2", 2, "--set parallel.zero=2"},
      {"tp2", 2, "--set parallel.tp=2"},
      {"tp2_sp", 2, "--set parallel.tp=2 --set parallel.sp=true"},
      {"pp2_1f1b", 2, "--set parallel.pp=2"},
      {"pp2_gpipe", 2, "--set parallel.pp=2 --set parallel.schedule=gpipe"},
      {"pp2_interleaved", 2, "--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"},
      {"dp2_tp2_zero1", 4, "--set parallel.tp=2 --set parallel.zero=1"},
      {"tp2_pp2", 4, "--set parallel.tp=2 --set parallel.pp=2"},
      {"dp2_pp2_zero2", 4, "--set parallel.pp=2 --set parallel.zero=2"},
      {"bf16_single", 1, "--set precision.compute=bf16"},
      {"bf16_tp2_sp_selective", 2,
       "--set precision.compute=bf16 --set parallel.tp=2 --set parallel.sp=true --set train.recompute=selective"},
      {"bf16_dp2_zero1", 2, "--set precision.compute=bf16 --set parallel.zero=1"},
      {"llama_single", 1, kLlama},
      {"llama_tp2_sp", 2, kLlama + " --set parallel.tp=2 --set parallel.sp=true"},
      {"llama_pp2", 2, kLlama + " --set parallel.pp=2"},
  };
  nlohmann::json measured = {{"runs", nlohmann::json::object()}};
  auto check = [&](const std::string& name, const fs::path& run_dir) {
    measured["runs"][name] = fingerprint(run_dir);
    if (record_to) return;
    ASSERT_TRUE(recorded["runs"].contains(name)) << name << " has no recorded fingerprint";
    EXPECT_EQ(measured["runs"][name].dump(1), recorded["runs"][name].dump(1)) << name;
  };
  for (const auto& [name, ranks, settings] : layouts) {
    check(name, train(name, ranks == 1 ? std::string() : mpirun(ranks), kSettings + " " + settings));
  }
  // Resume at the same layout, and reshard a tp × pp checkpoint into ZeRO-2 data parallelism.
  for (const auto& [name, from, ranks, settings] :
       {std::tuple{"resumed_tp2_pp2", "tp2_pp2", 4, "--set parallel.tp=2 --set parallel.pp=2"},
        std::tuple{"resharded_tp2_pp2_to_dp2_zero2", "tp2_pp2", 2, "--set parallel.zero=2"}}) {
    fs::path resumed = root() / name;
    fs::create_directories(resumed);
    fs::copy(root() / from / "step_00000003", resumed / "step_00000003", fs::copy_options::recursive);
    std::ofstream(resumed / "latest") << "step_00000003";
    check(name, train(name, mpirun(ranks), kSettings + " --set checkpoint.resume=true " + settings));
  }
  if (record_to) {
    recordings["cpus"][cpu] = measured;
    std::ofstream(record_to) << recordings.dump(1) << "\n";
    GTEST_SKIP() << "recorded this CPU's fingerprints to " << record_to;
  }
}

}  // namespace
}  // namespace strata
