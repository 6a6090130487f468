// Cluster descriptions: the shipped presets parse, and nonsense is refused
// with a message naming the file and key.
#include "planner/hardware.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "planner/model_spec.h"
#include "planner/search.h"
#include "planner_test_support.h"

namespace strata {
namespace {

const char* kValid = R"(
[cluster]
name = "x"
nodes = 2
devices_per_node = 4
[device]
name = "d"
memory_gib = 16
reserved_gib = 1
memory_bandwidth_gbps = 900
memory_efficiency = 0.8
op_overhead_us = 2
[device.bf16]
matrix_tflops = 100
vector_tflops = 10
gemm_efficiency = [[1e8, 0.25], [1e10, 0.75]]
attention_efficiency = [[1e9, 0.5]]
[intra_node]
bandwidth_gbps = 100
latency_us = 3
[inter_node]
nics_per_node = 2
nic_bandwidth_gbps = 12.5
latency_us = 10
)";

std::string replaced(const std::string& from, const std::string& to) {
  std::string text = kValid;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse_cluster(text, "bad.toml");
    ADD_FAILURE() << "accepted a cluster that should fail with: " << needle;
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("bad.toml"), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
}

TEST(PlannerHardware, ParsesUnitsOfADescription) {
  ClusterSpec c = parse_cluster(kValid, "ok.toml");
  EXPECT_EQ(c.devices(), 8);
  EXPECT_DOUBLE_EQ(c.device.memory_bytes, 16.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(c.device.usable_memory_bytes(), 15.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(c.device.memory_bandwidth_Bps, 900e9);
  EXPECT_DOUBLE_EQ(c.device.op_overhead_s, 2e-6);
  EXPECT_DOUBLE_EQ(c.device.performance(DType::BF16).matrix_flops, 100e12);
  EXPECT_DOUBLE_EQ(c.intra_node.latency_s, 3e-6);
  EXPECT_DOUBLE_EQ(c.node_network_Bps(), 25e9);
  EXPECT_THROW(c.device.performance(DType::F32), Error);
}

TEST(PlannerHardware, EfficiencyIsLinearInLogFlopsAndFlatBeyondTheEnds) {
  ClusterSpec c = parse_cluster(kValid, "ok.toml");
  const EfficiencyCurve& gemm = c.device.performance(DType::BF16).gemm;
  EXPECT_DOUBLE_EQ(gemm.at(1e6), 0.25);
  EXPECT_DOUBLE_EQ(gemm.at(1e12), 0.75);
  EXPECT_NEAR(gemm.at(1e9), 0.5, 1e-12);  // halfway in log10 between 1e8 and 1e10
  EXPECT_NEAR(gemm.at(std::pow(10.0, 8.5)), 0.375, 1e-12);
}

TEST(PlannerHardware, RefusesNonsense) {
  expect_error(replaced("latency_us = 3", "latency_us = 3\nspeed = 1"), "unknown key 'intra_node.speed'");
  expect_error(replaced("memory_gib = 16\n", ""), "missing key 'device.memory_gib'");
  expect_error(replaced("memory_gib = 16", "memory_gib = -16"), "'device.memory_gib' must be positive");
  expect_error(replaced("reserved_gib = 1", "reserved_gib = 16"), "must be less than memory_gib");
  expect_error(replaced("memory_efficiency = 0.8", "memory_efficiency = 1.5"), "must be in (0, 1]");
  expect_error(replaced("nodes = 2", "nodes = 0"), "'cluster.nodes' must be at least 1");
  expect_error(replaced("nodes = 2", "nodes = \"two\""), "'cluster.nodes' must be an integer");
  expect_error(replaced("[[1e8, 0.25], [1e10, 0.75]]", "[[1e10, 0.25], [1e8, 0.75]]"), "must increase");
  expect_error(replaced("[[1e8, 0.25], [1e10, 0.75]]", "[[1e8, 1.25]]"), "fraction of peak must be in (0, 1]");
  expect_error(replaced("[device.bf16]", "[device.bf17]"), "unknown key 'device.bf17'");
  std::string no_network = kValid;
  no_network = no_network.substr(0, no_network.find("[inter_node]"));
  expect_error(no_network, "missing table [inter_node]");
  expect_error("[cluster\n", "invalid TOML");
}

TEST(PlannerHardware, ShippedPresetsParse) {
  for (const char* name : {"dgx-a100-80gb", "dgx-h100", "ascend-910b", "this-machine"}) {
    ClusterSpec c = load_cluster(testing::preset_path(name));
    EXPECT_GE(c.devices(), 2) << name;
    EXPECT_FALSE(c.device.dtypes.empty()) << name;
  }
  ClusterSpec a100 = load_cluster(testing::preset_path("dgx-a100-80gb"));
  EXPECT_DOUBLE_EQ(a100.device.performance(DType::BF16).matrix_flops, 312e12);  // dense, not the sparse 624
  ClusterSpec h100 = load_cluster(testing::preset_path("dgx-h100"));
  EXPECT_DOUBLE_EQ(h100.device.memory_bandwidth_Bps, 3350e9);
  ClusterSpec ascend = load_cluster(testing::preset_path("ascend-910b"));
  EXPECT_FALSE(ascend.device.computes(DType::F32));
  // Its f32 table is the vector units' alone, for the optimizer's element-wise work.
  EXPECT_DOUBLE_EQ(ascend.device.performance(DType::F32).vector_flops, 11.05e12);
  EXPECT_DOUBLE_EQ(ascend.device.performance(DType::F32).matrix_flops, 0.0);
}

TEST(PlannerHardware, AVectorOnlyDtypeHasNoMatrixFiguresAndTheyComeTogether) {
  ClusterSpec vector_f32 = parse_cluster(std::string(kValid) + "[device.f32]\nvector_tflops = 5\n", "x.toml");
  EXPECT_FALSE(vector_f32.device.computes(DType::F32));
  EXPECT_TRUE(vector_f32.device.computes(DType::BF16));
  expect_error(std::string(kValid) + "[device.f32]\nvector_tflops = 5\ngemm_efficiency = [[1e8, 0.5]]\n",
               "missing key 'device.f32.matrix_tflops'");
}

// Every shipped preset plans a model in its default dtype (bf16 where the matrix engine has it): the
// optimizer's f32 element-wise work is priced on every device, the Ascend's vector units included.
TEST(PlannerHardware, EveryShippedPresetPlansAModel) {
  for (const char* name : {"dgx-a100-80gb", "dgx-h100", "ascend-910b", "this-machine"}) {
    ClusterSpec cluster = load_cluster(testing::preset_path(name));
    DType dtype = cluster.device.computes(DType::BF16) ? DType::BF16 : DType::F32;
    CostModel model(PlanningProblem{"gpt2-small", model_preset("gpt2-small").config, 64, 1024, dtype, cluster});
    SearchResult result = search_plans(model, {}, 1);
    ASSERT_FALSE(result.ranked.empty()) << name;
    EXPECT_GT(result.ranked[0].step_s, 0.0) << name;
  }
  ClusterSpec ascend = load_cluster(testing::preset_path("ascend-910b"));
  try {
    CostModel f32(PlanningProblem{"gpt2-small", model_preset("gpt2-small").config, 64, 1024, DType::F32, ascend});
    ADD_FAILURE() << "planned f32 GEMMs on a device whose matrix engine has no f32 figures";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("computes f32 on its vector units only"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace strata
