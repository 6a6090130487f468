// `strata ops` (the operator-coverage report) run as the real executable:
// every cell must agree with what the backends actually register, recomputed
// here from the kernel tables and schemas: a kernel on the backend is native,
// else an op with a decomposition is decomposed (into the ops its schema
// lists), else a `ref` kernel is the ref fallback. Given a config, the job's
// training step: every op the trainer's graph and optimizer run, FLOP shares
// summing to one, and the verdict.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "model/family.h"
#include "run_strata.h"
#include "train/op_coverage.h"
#include "train/trainer.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::run_strata;
using testing::StrataRun;

std::string expected_route(const Backend& backend, const std::string& op, DType dtype) {
  if (backend.find(op, dtype) != nullptr) return backend.is_emulated(op, dtype) ? "emulated" : "native";
  if (OpRegistry::global().get(op).decompose) return "decomposed";
  if (get_backend("ref").find(op, dtype) != nullptr) return "ref-fallback";
  return "missing";
}

void check_report(const std::string& backend_name, const std::vector<DType>& dtypes, const std::string& dtype_flag) {
  StrataRun result = run_strata("ops --json --backend " + backend_name + dtype_flag, false);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  nlohmann::json report = nlohmann::json::parse(result.output);
  const Backend& backend = get_backend(backend_name);
  EXPECT_EQ(report["backend"], backend_name);
  std::vector<std::string> ops = OpRegistry::global().names();
  ASSERT_EQ(report["ops"].size(), ops.size());
  std::map<std::string, std::map<std::string, int>> totals;
  for (size_t i = 0; i < ops.size(); ++i) {
    const nlohmann::json& entry = report["ops"][i];
    ASSERT_EQ(entry["op"], ops[i]);
    for (DType dtype : dtypes) {
      std::string name(dtype_name(dtype));
      std::string route = expected_route(backend, ops[i], dtype);
      ++totals[name][route];
      const nlohmann::json& cell = entry["routes"][name];
      EXPECT_EQ(cell["route"], route) << ops[i] << " " << name;
      if (route != "decomposed") continue;
      const std::vector<std::string>& parts = OpRegistry::global().get(ops[i]).decomposes_into;
      ASSERT_EQ(cell["into"].size(), parts.size()) << ops[i];
      for (size_t p = 0; p < parts.size(); ++p) {
        EXPECT_EQ(cell["into"][p]["op"], parts[p]);
        EXPECT_EQ(cell["into"][p]["route"], expected_route(backend, parts[p], dtype)) << ops[i] << " " << parts[p];
      }
    }
  }
  for (DType dtype : dtypes) {
    std::string name(dtype_name(dtype));
    for (const char* route : {"native", "emulated", "decomposed", "ref-fallback", "missing"}) {
      EXPECT_EQ(report["totals"][name][route], totals[name][route]) << name << " " << route;
    }
  }
}

// ref, the golden model, runs every op natively in f32.
TEST(OpsCommand, RefReportMatchesItsKernels) {
  check_report("ref", {DType::F64, DType::F32, DType::BF16, DType::F16}, "");
  StrataRun result = run_strata("ops --json --backend ref --dtype f32", false);
  nlohmann::json report = nlohmann::json::parse(result.output);
  EXPECT_EQ(report["totals"]["f32"]["native"], OpRegistry::global().names().size());
}

TEST(OpsCommand, CpuReportMatchesItsKernels) {
  check_report("cpu", {DType::F64, DType::F32, DType::BF16, DType::F16}, "");
  check_report("cpu", {DType::F32, DType::F16}, " --dtype f32,f16");
}

// The text table: one row per op with a route per dtype, then each
// decomposition with the ops it runs.
TEST(OpsCommand, TextReportShowsRoutesAndDecompositions) {
  StrataRun result = run_strata("ops --backend cpu --dtype f32,f16");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::map<std::string, std::vector<std::string>> rows;  // first word -> the rest, first such line
  std::istringstream lines(result.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    std::vector<std::string> rest;
    for (std::string word; words >> word;) rest.push_back(word);
    rows.emplace(first, rest);
  }
  const Backend& cpu = get_backend("cpu");
  for (const std::string& op : OpRegistry::global().names()) {
    std::vector<std::string> expected{expected_route(cpu, op, DType::F32), expected_route(cpu, op, DType::F16)};
    EXPECT_EQ(rows[op], expected) << op;
    const std::vector<std::string>& parts = OpRegistry::global().get(op).decomposes_into;
    if (expected_route(cpu, op, DType::F16) == "decomposed" && !parts.empty()) {
      EXPECT_THAT(result.output, HasSubstr("  " + op + " f16: " + parts[0] + " ("));
    }
  }
  EXPECT_THAT(result.output, HasSubstr("total native"));
}

TEST(OpsCommand, BadArgumentsAreNamed) {
  StrataRun unknown = run_strata("ops --backend nosuch");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.output, HasSubstr("nosuch"));
  StrataRun integer = run_strata("ops --dtype f32,i32");
  EXPECT_NE(integer.exit_code, 0);
  EXPECT_THAT(integer.output, HasSubstr("i32"));
  StrataRun bad = run_strata("ops --dtype f33");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.output, HasSubstr("f33"));
}

// The config's spelling of a precision (fp16) names the same dtype here, printed as f16.
TEST(OpsCommand, ReadsTheConfigsSpellingOfADtype) {
  StrataRun config_spelling = run_strata("ops --backend cpu --dtype fp32,fp16");
  StrataRun dtype_spelling = run_strata("ops --backend cpu --dtype f32,f16");
  EXPECT_EQ(config_spelling.exit_code, 0) << config_spelling.output;
  EXPECT_EQ(config_spelling.output, dtype_spelling.output);
  EXPECT_THAT(config_spelling.output, Not(HasSubstr("fp16")));
}

// Given a config: the job's training step op by op (train/op_coverage.h), and a verdict.
std::string config_path(const std::string& name) { return std::string(STRATA_SOURCE_DIR) + "/configs/" + name; }

ConfigCoverage coverage_of(const std::string& name, const std::string& backend, const std::string& precision) {
  TrainConfig config = load_train_config(config_path(name), {"ops.backend=" + backend});
  config.precision = precision;
  return config_op_coverage(config);
}

double share_sum(const ConfigCoverage& coverage) {
  return std::accumulate(coverage.rows.begin(), coverage.rows.end(), 0.0,
                         [](double sum, const CoverageRow& row) { return sum + row.share; });
}

// Every node of the trainer's graph once per micro-batch, and AdamW once per parameter.
void check_counts(const ConfigCoverage& coverage, const TrainConfig& config) {
  const ModelGraph model = build_rank_model(config, /*training=*/true);
  std::map<std::string, int64_t> nodes;
  for (const Node& node : model.graph.nodes()) nodes[node.op] += coverage.micro_batches;
  std::map<std::string, int64_t> counted;
  for (const CoverageRow& row : coverage.rows) counted[row.op] += row.count;
  for (const auto& [op, count] : nodes) {
    if (op != "add") {
      EXPECT_EQ(counted[op], count) << op;
    }
  }
  EXPECT_EQ(counted["adamw"], static_cast<int64_t>(model_param_specs(config.model).size()));
  EXPECT_GE(coverage.micro_batches, 2);  // so that the accumulation adds are counted too
  EXPECT_GT(counted["add"], nodes["add"]);
}

TEST(OpsCommand, DefaultConfigOnCpuInF32IsAQuickSwitch) {
  ConfigCoverage coverage = coverage_of("default.toml", "cpu", "f32");
  EXPECT_TRUE(coverage.quick_switch()) << coverage_verdict(coverage);
  EXPECT_NEAR(share_sum(coverage), 1.0, 1e-9);
  ASSERT_FALSE(coverage.rows.empty());
  EXPECT_THAT(coverage.rows.front().op, ::testing::AnyOf("matmul", "linear"));  // the largest share first
  for (size_t i = 1; i < coverage.rows.size(); ++i) EXPECT_GE(coverage.rows[i - 1].share, coverage.rows[i].share);
  for (const CoverageRow& row : coverage.rows) EXPECT_EQ(row.route, Route::Native) << row.op;
  check_counts(coverage, load_train_config(config_path("default.toml"), {}));
  EXPECT_THAT(coverage_verdict(coverage), HasSubstr("quick switch"));

  StrataRun text = run_strata("ops " + config_path("default.toml") + " --backend cpu --precision f32");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("verdict: quick switch"));
  StrataRun json = run_strata("ops " + config_path("default.toml") + " --backend cpu --precision fp32 --json", false);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  nlohmann::json report = nlohmann::json::parse(json.output);
  EXPECT_EQ(report["verdict"]["quick_switch"], true);
  EXPECT_EQ(report["precision"], "f32");
  EXPECT_EQ(report["ops"].size(), coverage.rows.size());
  double sum = 0;
  for (const nlohmann::json& row : report["ops"]) sum += row["share"].get<double>();
  EXPECT_NEAR(sum, 1.0, 1e-9);
}

// The cpu backend has no f16 arithmetic: its f16 kernels compute in f32 (emulated), so an f16
// job needs work, and the verdict names the ops with their share of the step.
TEST(OpsCommand, F16OnCpuNeedsWorkNamingTheOps) {
  ConfigCoverage coverage = coverage_of("default.toml", "cpu", "f16");
  ASSERT_FALSE(coverage.quick_switch());
  EXPECT_NEAR(share_sum(coverage), 1.0, 1e-9);
  const Backend& cpu = get_backend("cpu");
  ASSERT_TRUE(cpu.is_emulated("matmul", DType::F16));
  auto matmul = std::find_if(coverage.gaps.begin(), coverage.gaps.end(), [](const CoverageGap& gap) {
    return gap.op == "matmul" && gap.dtype == DType::F16;
  });
  ASSERT_NE(matmul, coverage.gaps.end());
  EXPECT_EQ(matmul->route, Route::Emulated);
  EXPECT_GT(matmul->share, 0.5);
  for (const CoverageGap& gap : coverage.gaps) EXPECT_NE(gap.route, Route::Native);
  // f32 ops of the policy (layernorm, the loss, AdamW) stay native.
  for (const CoverageRow& row : coverage.rows) {
    if (row.dtype == DType::F32) {
      EXPECT_EQ(row.route, Route::Native) << row.op;
    }
  }
  std::string verdict = coverage_verdict(coverage);
  EXPECT_THAT(verdict, HasSubstr("needs work"));
  EXPECT_THAT(verdict, HasSubstr(fmt::format("matmul f16 {:.2f}% (", 100 * matmul->share)));
  EXPECT_THAT(verdict, HasSubstr("emulated"));

  StrataRun json = run_strata("ops " + config_path("default.toml") + " --precision f16 --json", false);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  nlohmann::json report = nlohmann::json::parse(json.output);
  EXPECT_EQ(report["verdict"]["quick_switch"], false);
  EXPECT_EQ(report["verdict"]["needs_work"].size(), coverage.gaps.size());
  EXPECT_EQ(report["verdict"]["needs_work"][0]["op"], coverage.gaps.front().op);
  StrataRun text = run_strata("ops " + config_path("default.toml") + " --precision f16");
  EXPECT_THAT(text.output, HasSubstr("verdict: needs work"));
  EXPECT_THAT(text.output, HasSubstr("matmul f16"));
}

// A backend without the fused attention kernels (they decompose) and without gelu (the ref
// fallback): the rows and the verdict say so, with what the decomposition runs.
TEST(OpsCommand, DecomposedAndRefFallbackOpsAreNamed) {
  const Backend& cpu = get_backend("cpu");
  auto partial = std::make_unique<Backend>("cpu_without_attention_and_gelu");
  for (const auto& [op, dtype] : cpu.kernels()) {
    if (op == "attention" || op == "attention_backward" || op == "gelu") continue;
    if (cpu.is_emulated(op, dtype)) {
      partial->add_emulated_kernel(op, dtype, *cpu.find(op, dtype));
    } else {
      partial->add_kernel(op, dtype, *cpu.find(op, dtype));
    }
  }
  register_backend(std::move(partial));
  ConfigCoverage coverage = coverage_of("default.toml", "cpu_without_attention_and_gelu", "f32");
  ASSERT_FALSE(coverage.quick_switch());
  EXPECT_NEAR(share_sum(coverage), 1.0, 1e-9);
  std::map<std::string, Route> routes;
  for (const CoverageGap& gap : coverage.gaps) routes[gap.op] = gap.route;
  EXPECT_EQ(routes, (std::map<std::string, Route>{{"attention", Route::Decomposed},
                                                  {"attention_backward", Route::Decomposed},
                                                  {"gelu", Route::Reference}}));
  const std::vector<std::string>& parts = OpRegistry::global().get("attention").decomposes_into;
  ASSERT_FALSE(parts.empty());
  std::string verdict = coverage_verdict(coverage);
  EXPECT_THAT(verdict, HasSubstr("decomposed: attention_backward f32"));
  EXPECT_THAT(verdict, HasSubstr("attention f32"));
  EXPECT_THAT(verdict, HasSubstr("into " + parts[0]));
  EXPECT_THAT(verdict, HasSubstr("ref fallback: gelu f32"));
  nlohmann::json report = coverage_json(coverage);
  for (const nlohmann::json& row : report["ops"]) {
    if (row["op"] == "attention") {
      EXPECT_EQ(row["route"], "decomposed");
      EXPECT_EQ(row["into"][0]["op"], parts[0]);
    }
  }
  EXPECT_THAT(coverage_text(coverage), HasSubstr("decomposed into " + parts[0]));
}

TEST(OpsCommand, LlamaConfigIsCovered) {
  for (const char* precision : {"f32", "bf16"}) {
    ConfigCoverage coverage = coverage_of("llama_small.toml", "cpu", precision);
    EXPECT_EQ(coverage.family, "llama");
    EXPECT_NEAR(share_sum(coverage), 1.0, 1e-9) << precision;
    std::set<std::string> ops;
    for (const CoverageRow& row : coverage.rows) ops.insert(row.op);
    for (const char* op : {"rms_norm", "rope", "swiglu", "grouped_attention", "grouped_attention_backward"}) {
      EXPECT_TRUE(ops.count(op) || ops.count(std::string("add_") + op)) << op << " " << precision;
    }
  }
  TrainConfig config = load_train_config(config_path("llama_small.toml"), {});
  check_counts(config_op_coverage(config), config);
  StrataRun text = run_strata("ops " + config_path("llama_small.toml") + " --backend ref");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("backend 'ref'"));
  EXPECT_THAT(text.output, HasSubstr("verdict: "));
}

// The mixture of experts' ops, the backward ones too, in the coverage of a Mixtral training step.
TEST(OpsCommand, MixtralConfigIsCovered) {
  for (const char* precision : {"f32", "bf16"}) {
    ConfigCoverage coverage = coverage_of("mixtral_small.toml", "cpu", precision);
    EXPECT_EQ(coverage.family, "mixtral");
    EXPECT_NEAR(share_sum(coverage), 1.0, 1e-9) << precision;
    std::set<std::string> ops;
    for (const CoverageRow& row : coverage.rows) ops.insert(row.op);
    for (const char* op : {"moe_route", "moe_route_backward", "moe_permute", "moe_permute_backward", "grouped_matmul",
                           "grouped_matmul_weight_grad", "moe_combine", "moe_combine_backward", "moe_aux_loss",
                           "moe_router_loss_terms_backward"}) {
      EXPECT_TRUE(ops.count(op)) << op << " " << precision;
    }
  }
  TrainConfig config = load_train_config(config_path("mixtral_small.toml"), {});
  check_counts(config_op_coverage(config), config);
}

TEST(OpsCommand, ConfigArgumentsAreChecked) {
  StrataRun dtype = run_strata("ops " + config_path("default.toml") + " --dtype f32");
  EXPECT_NE(dtype.exit_code, 0);
  EXPECT_THAT(dtype.output, HasSubstr("--precision"));
  StrataRun precision = run_strata("ops --precision bf16");
  EXPECT_NE(precision.exit_code, 0);
  EXPECT_THAT(precision.output, HasSubstr("CONFIG.toml"));
  StrataRun bad = run_strata("ops " + config_path("default.toml") + " --precision f33");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.output, HasSubstr("f33"));
  StrataRun backend = run_strata("ops " + config_path("default.toml") + " --backend nosuch");
  EXPECT_NE(backend.exit_code, 0);
  EXPECT_THAT(backend.output, HasSubstr("nosuch"));
}

}  // namespace
}  // namespace strata
