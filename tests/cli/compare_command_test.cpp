// `strata compare` end to end: exit statuses (0 all pass, 3 a tensor fails, 1 an error), the JSON
// and CSV files, the golden inputs, and `strata train` reading a config with a [compare] table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "cli/run_strata.h"
#include "support/test_files.h"
#include "support/tiny_compare_config.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::run_strata;

// A move to a device, op by op and over steps, with the default f32 tolerances: GPT-2 and LLaMA.
TEST(CompareCommand, CpuAgainstOpenCLPassesOpByOpAndOverSteps) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  for (const std::string family : {"", " --set model.family=llama --set model.intermediate_size=48"}) {
    const auto run = run_strata("compare " + config + " --a ops.backend=cpu --b ops.backend=opencl --steps 2" + family);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_THAT(run.output, HasSubstr(" 0 fail"));
    EXPECT_THAT(run.output, HasSubstr("result: pass"));
  }
}

TEST(CompareCommand, RefAgainstCpuExitsZeroAndWritesJsonAndCsv) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  const auto run = run_strata("compare " + config + " --a ops.backend=ref --b ops.backend=cpu --json " +
                              (dir / "c.json").string() + " --csv " + (dir / "c.csv").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("result: pass"));
  const nlohmann::json json = nlohmann::json::parse(testing::read_bytes(dir / "c.json"));
  EXPECT_EQ(json.at("result"), "pass");
  EXPECT_TRUE(json.at("first_divergence").is_null());
  const std::string csv = testing::read_bytes(dir / "c.csv");
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), json.at("tensors").size() + 1);
  EXPECT_THAT(csv, HasSubstr("\ntransformer.h.0.mlp.gelu.forward.y,gelu,pass,"));
}

TEST(CompareCommand, AFailingTensorExitsThreeWithTheFirstDivergenceAtTheTop) {
  testing::TempDir dir;
  const std::string config =
      testing::write_tiny_compare_job(dir.path(), "[compare.bf16]\nmin_cosine = 0.999999\nrtol = 1e-4\n").string();
  const auto run = run_strata("compare " + config + " --b precision.compute=bf16 --rerun none");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  const size_t first = run.output.find("FIRST DIVERGENT OP: transformer.h.0.attn.c_attn.forward.y (linear)");
  EXPECT_NE(first, std::string::npos) << run.output;
  EXPECT_LT(first, run.output.find("tensors that fail"));
  EXPECT_THAT(run.output, HasSubstr("result: FAIL"));
}

// Layouts: each side runs as ranks of strata train; tensor, data and pipeline parallelism reproduce one
// process (and each other) step by step within the f32 step groups.
TEST(CompareCommand, LayoutsAreComparedStepByStep) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  auto run = run_strata("compare " + config + " --b parallel.tp=2 --steps 2 --json " + (dir / "tp.json").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("the config as it is (dp=1 tp=1 pp=1)"));
  EXPECT_THAT(run.output, HasSubstr("parallel.tp=2 (dp=1 tp=2 pp=1)"));
  const nlohmann::json json = nlohmann::json::parse(testing::read_bytes(dir / "tp.json"));
  EXPECT_EQ(json.at("result"), "pass");
  std::set<std::string> names;
  for (const nlohmann::json& tensor : json.at("tensors")) names.insert(tensor.at("name").get<std::string>());
  for (const char* name : {"step1.loss", "step2.grad_norm", "step2.transformer.h.0.attn.c_attn.weight",
                           "step2.transformer.h.1.mlp.c_proj.bias", "step2.transformer.wte.weight"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
  const auto steps = std::count_if(names.begin(), names.end(), [](const std::string& name) { return name.starts_with("step"); });
  EXPECT_EQ(steps, 2 * (2 + 2 * 12 + 4));  // per step: loss, norm, 12 per block, wte, wpe, ln_f w and b

  run = run_strata("compare " + config + " --a parallel.dp=2 --a parallel.zero=1 --b parallel.pp=2 --steps 2");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("(dp=2 tp=1 pp=1 zero=1)"));
  EXPECT_THAT(run.output, HasSubstr("result: pass"));
}

TEST(CompareCommand, ALayoutThatTrainsDifferentlyFailsAtTheFirstStepItChanges) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  const auto run = run_strata("compare " + config + " --b parallel.tp=2 --b train.lr=3.3e-3 --steps 2");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  // The first step's loss and gradient norm come before its update; the parameters after it differ.
  EXPECT_THAT(run.output, HasSubstr("FIRST DIVERGENT OP: step1.transformer."));
}

// Every tensor of a layout's graph, each rank's piece put back whole, against one process's: the
// same names (the forward and backward tensors, every parameter's gradient), all within the f32
// groups, under tensor parallelism (c_attn's fused q | k | v split by heads, the vocabulary-split
// logits and embedding, partial gradients summed), with sequence parallelism, and with the layers
// over pipeline stages as well (the tied embedding's gradient summed over the first and last).
std::map<std::string, std::string> statuses(const std::filesystem::path& json_file) {
  std::map<std::string, std::string> by_name;
  const nlohmann::json comparison = nlohmann::json::parse(testing::read_bytes(json_file));
  for (const nlohmann::json& tensor : comparison.at("tensors")) {
    by_name[tensor.at("name").get<std::string>()] = tensor.at("status").get<std::string>();
  }
  return by_name;
}

TEST(CompareCommand, LayoutsCompareEveryGraphTensorPutBackTogether) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  auto run = run_strata("compare " + config + " --all --json " + (dir / "one.json").string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::map<std::string, std::string> one = statuses(dir / "one.json");
  for (const char* name : {"transformer.h.0.attn.c_attn.forward.y", "loss.grad_logits.backward.dlogits",
                           "transformer.h.1.attn.c_proj.grad_x.backward.out", "transformer.wte.weight.grad"}) {
    EXPECT_EQ(one.count(name), 1u) << name;
  }
  run = run_strata("compare " + config + " --b parallel.tp=2 --all --json " + (dir / "tp.json").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("its ranks' tensors put back together whole"));
  const std::map<std::string, std::string> tp = statuses(dir / "tp.json");
  EXPECT_EQ(tp.size(), one.size());
  for (const auto& [name, status] : one) EXPECT_EQ(tp.count(name) ? tp.at(name) : "absent", "pass") << name;

  run = run_strata("compare " + config + " --a parallel.tp=2 --a parallel.sp=true --b parallel.tp=2 --b parallel.pp=2 "
                   "--all --json " + (dir / "mesh.json").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const std::map<std::string, std::string> mesh = statuses(dir / "mesh.json");
  for (const char* name : {"transformer.h.0.attn.c_attn.forward.y", "loss.grad_logits.backward.dlogits",
                           "transformer.h.1.attn.grad_qkv.backward.dqkv", "transformer.wte.weight.grad",
                           "transformer.h.0.ln_1.weight.grad"}) {
    EXPECT_EQ(mesh.count(name) ? mesh.at(name) : "absent", "pass") << name;
  }
}

// A layout's first divergent op is found among its assembled tensors as in one process.
TEST(CompareCommand, ALayoutsFirstDivergenceIsItsFirstFailingOp) {
  testing::TempDir dir;
  const std::string config =
      testing::write_tiny_compare_job(dir.path(), "[compare.bf16]\nmin_cosine = 0.999999\nrtol = 1e-4\n").string();
  const auto run = run_strata("compare " + config + " --b parallel.tp=2 --b precision.compute=bf16 --rerun none");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_THAT(run.output, HasSubstr("FIRST DIVERGENT OP: transformer.h.0.attn.c_attn.forward.y (linear)"));
}

// A fault planted in one cpu kernel (STRATA_TEST_PLANT_FAULT) is the first divergent op, judged against the
// f64 re-run as a fault on side b, with what follows from it inherited; GPT-2 and LLaMA.
TEST(CompareCommand, APlantedFaultIsTheFirstFaultTheTruthFinds) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  const std::string llama = " --set model.family=llama --set model.intermediate_size=48";
  const std::vector<std::pair<std::string, std::string>> planted{
      {"add_layernorm:eps", "transformer.h.0.ln_1.forward.y (add_layernorm)"},
      {"linear:offbyone", "transformer.h.0.attn.c_attn.forward.y (linear)"},
      {"attention:scale", "transformer.h.0.attn.forward.out (attention)"},
      {"rms_norm:eps" + llama, "model.layers.0.input_layernorm.forward.y (rms_norm)"},
      {"grouped_attention:scale" + llama, "model.layers.0.self_attn.forward.out (grouped_attention)"},
      {"swiglu:offbyone" + llama, "model.layers.0.mlp.act.forward.y (swiglu)"}};
  for (const auto& [fault, blamed] : planted) {
    const size_t space = fault.find(' ');
    const auto run = run_strata("compare " + config + " --a ops.backend=ref" + (space == std::string::npos ? "" : fault.substr(space)),
                                true, "STRATA_TEST_PLANT_FAULT=" + fault.substr(0, space));
    EXPECT_EQ(run.exit_code, 3) << fault << run.output;
    EXPECT_THAT(run.output, HasSubstr("FIRST DIVERGENT OP: " + blamed + ", the first fault the f64 re-run found, fault on b"))
        << fault << run.output;
    EXPECT_THAT(run.output, HasSubstr("inherited")) << fault;
  }
  const auto bad = run_strata("compare " + config, true, "STRATA_TEST_PLANT_FAULT=gelu:typo");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output, HasSubstr("STRATA_TEST_PLANT_FAULT=gelu:typo: unknown kind 'typo'"));
  const auto maskless = run_strata("compare " + config, true, "STRATA_TEST_PLANT_FAULT=gelu:mask");
  EXPECT_EQ(maskless.exit_code, 1);
  EXPECT_THAT(maskless.output, HasSubstr("STRATA_TEST_PLANT_FAULT=gelu:mask: only causal attention has a mask"));
}

// Causal attention's mask one position off (query i also sees key i + 1) is the first fault, on the attention, on
// side b, by orders of magnitude; with every tensor re-run, each one before it (its inputs among them) is a rounding
// difference. GPT-2's packed attention and LLaMA's grouped one.
TEST(CompareCommand, AMaskOnePositionOffIsTheFirstFaultOnTheAttention) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  const std::string json_file = (dir / "mask.json").string();
  const std::vector<std::array<std::string, 3>> planted{
      {"attention", "", "transformer.h.0.attn.forward.out"},
      {"grouped_attention", " --set model.family=llama --set model.intermediate_size=48",
       "model.layers.0.self_attn.forward.out"}};
  for (const auto& [op, family, blamed] : planted) {
    const auto run = run_strata("compare " + config + " --a ops.backend=ref --rerun all --json " + json_file + family,
                                true, "STRATA_TEST_PLANT_FAULT=" + op + ":mask");
    EXPECT_EQ(run.exit_code, 3) << op << run.output;
    EXPECT_THAT(run.output, HasSubstr("FIRST DIVERGENT OP: " + blamed + " (" + op + "), the first fault the f64 re-run "
                                      "found, fault on b")) << run.output;
    const nlohmann::json comparison = nlohmann::json::parse(testing::read_bytes(json_file));
    ASSERT_FALSE(comparison.at("first_divergence").is_null()) << op;
    EXPECT_EQ(comparison.at("first_divergence").at("tensor"), blamed);
    std::set<std::string> before;
    for (const nlohmann::json& tensor : comparison.at("tensors")) {
      const std::string name = tensor.at("name");
      if (name == blamed) {
        EXPECT_EQ(tensor.at("truth").at("verdict"), "fault on b") << name;
        EXPECT_LT(tensor.at("truth").at("a").at("error_over_bound").get<double>(), 1) << name;
        EXPECT_GT(tensor.at("truth").at("b").at("error_over_bound").get<double>(), 1e3) << name;
        break;
      }
      EXPECT_EQ(tensor.at("status"), "pass") << name;
      EXPECT_EQ(tensor.at("truth").at("verdict"), "rounding") << name;
      before.insert(name);
    }
    EXPECT_GE(before.size(), 4u) << op;  // the embedding, the norm, the projections
    for (const nlohmann::json& input : comparison.at("first_divergence").at("inputs")) {
      EXPECT_EQ(before.count(input.get<std::string>()), 1u) << input;
    }
  }
}

// A sum in another order is not a fault: `ref` (f64 accumulators, in order) against `cpu` (blocked f32 GEMMs,
// threaded reductions) differs in nearly every tensor, yet with every tensor re-run each is a rounding difference.
TEST(CompareCommand, AnotherAccumulationOrderIsNoFault) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  const std::string json_file = (dir / "order.json").string();
  for (const std::string family : {"", " --set model.family=llama --set model.intermediate_size=48"}) {
    const auto run = run_strata("compare " + config + " --a ops.backend=ref --rerun all --json " + json_file + family);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_THAT(run.output, HasSubstr(" 0 faults, 0 inherited from a fault upstream, 0 unjudged")) << run.output;
    const nlohmann::json comparison = nlohmann::json::parse(testing::read_bytes(json_file));
    size_t differing = 0, tensors = 0;
    for (const nlohmann::json& tensor : comparison.at("tensors")) {
      ++tensors;
      differing += tensor.at("metrics").at("max_abs").get<double>() > 0;
      EXPECT_EQ(tensor.at("truth").at("verdict"), "rounding") << tensor.at("name");
    }
    EXPECT_GT(differing, tensors * 9 / 10) << family;  // the sums' order shows in nearly every tensor
  }
}

// Against a layout, side a's node is re-run on side b's tensors put back together (a value the layout does
// not capture rebuilt from side a's node): the fault is found on b's assembled output, nothing is unjudged.
TEST(CompareCommand, APlantedFaultInALayoutIsFoundOnItsAssembledTensors) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  const auto run = run_strata("compare " + config + " --a ops.backend=ref --b parallel.tp=2", true,
                              "STRATA_TEST_PLANT_FAULT=attention:scale");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_THAT(run.output, HasSubstr("FIRST DIVERGENT OP: transformer.h.0.attn.forward.out (attention), the first fault the "
                                    "f64 re-run found, fault on b"))
      << run.output;
  EXPECT_THAT(run.output, HasSubstr(", 0 unjudged"));
}

// --explain prints a tensor's op, its inputs' figures, each side against the truth and the bound's terms.
TEST(CompareCommand, ExplainSaysWhy) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  const auto run = run_strata("compare " + config + " --a ops.backend=ref --explain transformer.h.1.attn.c_proj.forward.y");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("transformer.h.1.attn.c_proj.forward.y: op linear"));
  EXPECT_THAT(run.output, HasSubstr("  input transformer.h.1.attn.forward.out [2, 16, 32] f32: max|a| "));
  EXPECT_THAT(run.output, HasSubstr("  side b: max |b - truth| "));
  EXPECT_THAT(run.output, HasSubstr("bound summation: u_out|y| + gamma_32(u_acc) sum|terms|"));  // 32 products (the bias in sum|terms|)
}

TEST(CompareCommand, ErrorsNameTheKey) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path(), "[compare.f32]\nrtool = 1\n").string();
  auto run = run_strata("compare " + config);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("unknown key 'compare.f32.rtool'"));
  run = run_strata("compare " + config + " --b ops.backend=tpu");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("key 'ops.backend' must be one of \"ref\", \"cpu\", \"opencl\", got \"tpu\""));
}

TEST(CompareCommand, TrainIgnoresTheCompareTableAndGoldenInputsAreWritten) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path(), "[compare.f32]\nrtol = 1e-3\n").string();
  auto run = run_strata("train " + config + " --set train.steps=1");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  run = run_strata("compare " + config + " --set checkpoint.resume=true --golden-inputs " + (dir / "golden").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(testing::list_names(dir / "golden"),
            (std::vector<std::string>{"batch.safetensors", "config.json", "model.safetensors"}));
}

}  // namespace
}  // namespace strata
