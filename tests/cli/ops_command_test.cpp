// `strata ops` (the operator-coverage report) run as the real executable:
// every cell must agree with what the backends actually register, recomputed
// here from the kernel tables and schemas: a kernel on the backend is native,
// else an op with a decomposition is decomposed (into the ops its schema
// lists), else a `ref` kernel is the ref fallback.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "run_strata.h"

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

}  // namespace
}  // namespace strata
