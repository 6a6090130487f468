// The LLaMA family under every parallel layout, through the real executable: `mpirun -np N strata
// train` against one process running the same global batch, as the GPT-2 runs are checked. Grouped-
// query attention (4 query heads, 2 key/value heads), an untied head and a vocabulary (4099) that
// splits unevenly; a tied model too, whose embedding the first and last pipeline stage share. Losses
// per step within 1e-5 relative, parameters after 20 steps within 1e-5 of each tensor's largest value.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>

#include "parallel/run_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::mpirun;

// AdamW's epsilon is 1e-6, not the default 1e-8. Its step g/(|g| + eps) is ill-conditioned where a
// gradient element cancels to about eps: there a rounding residue of the element moves the parameter by
// lr x residue / eps. At 1e-8, on an AVX2 CPU, one gate_proj element (7.4e-9 against a median of 1.7e-4,
// the tensor's gradients agreeing to 4e-7 of its largest) moved 3.5x past the parameter bound in one
// step. The bound is unchanged; a layout bug moves parameters by a fraction of lr, far past it either way.
const std::string kSettings = "--set train.batch_size=2 --set train.global_batch=4 --set train.adam_eps=1e-6";
const std::string kStep20 = "step_00000020";

class LlamaParallelRun : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("llama_parallel",
                 "family = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 32\nintermediate_size = 48\n"
                 "vocab_size = 4099\nblock_size = 16\ntie_word_embeddings = false\nrope_scaling = \"llama3\"\n"
                 "rope_factor = 8.0\nrope_original_max_positions = 8\n");
  }
};

TEST_F(LlamaParallelRun, TensorSequencePipelineAndDataParallelLayoutsMatchOneProcess) {
  fs::path single = train("single", "", kSettings);
  for (const auto& [name, ranks, layout] :
       {std::tuple{"tp2", 2, "--set parallel.tp=2"}, std::tuple{"tp2_sp", 2, "--set parallel.tp=2 --set parallel.sp=true"},
        std::tuple{"pp2", 2, "--set parallel.pp=2"}, std::tuple{"dp2_zero1", 2, "--set parallel.zero=1"}}) {
    fs::path run = train(name, mpirun(ranks), kSettings + " " + layout);
    testing::expect_close_runs(single, run, kStep20, 1e-5, name);
  }
}

TEST_F(LlamaParallelRun, ATiedHeadAcrossPipelineStagesAndTensorRanksMatchesOneProcess) {
  const std::string tied = kSettings + " --set model.tie_word_embeddings=true";
  fs::path single = train("tied_single", "", tied);
  for (const auto& [name, layout] : {std::tuple{"tied_pp2", "--set parallel.pp=2"},
                                     std::tuple{"tied_tp2", "--set parallel.tp=2"}}) {
    fs::path run = train(name, mpirun(2), tied + " " + layout);
    testing::expect_close_runs(single, run, kStep20, 1e-5, name);
  }
}

TEST_F(LlamaParallelRun, KeyValueHeadsTheTensorDegreeDoesNotDivideAreRefusedNamingTheKey) {
  testing::LaunchResult run = testing::shell(mpirun(4) + STRATA_EXECUTABLE + std::string(" train ") + config() +
                                             " --set checkpoint.dir=" + (root() / "bad").string() +
                                             " --set parallel.tp=4");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("key 'parallel.tp' (4) must divide the key/value heads (model.n_kv_head = 2)"),
            std::string::npos)
      << run.output;
}

}  // namespace
}  // namespace strata
