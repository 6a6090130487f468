// Cluster descriptions: the shipped presets parse, and nonsense is refused
// with a message naming the file and key.
#include "planner/hardware.h"

#include <gtest/gtest.h>

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
memory_gib = { value = 16, source = "sheet" }
reserved_gib = { value = 1, source = "sheet" }
memory_bandwidth_gbps = { value = 900, source = "sheet" }
memory_efficiency = { value = 0.8, source = "sheet" }
op_overhead_us = { value = 2, source = "sheet" }
[device.bf16]
matrix_tflops = { value = 100, source = "sheet" }
vector_tflops = { value = 10, source = "sheet" }
compute_units = { value = 8, source = "sheet" }
gemm_tiles = { value = [[128, 256, 1.0], [64, 64, 0.5]], source = "sheet" }
gemm_k_step = { value = 32, source = "sheet" }
gemm_tile_overhead_us = { value = 1, source = "sheet" }
gemm_alignment = { value = [[8, 1.0], [2, 0.5], [1, 0.25]], source = "sheet" }
attention_efficiency = { value = 0.5, source = "sheet" }
attention_backward_efficiency = { value = 0.4, source = "sheet" }
attention_block_rows = { value = 128, source = "sheet" }
attention_head_dim_step = { value = 32, source = "sheet" }
attention_tile_overhead_us = { value = 1, source = "sheet" }
[intra_node]
bandwidth_gbps = { value = 100, source = "sheet" }
latency_us = { value = 3, source = "sheet" }
[inter_node]
nics_per_node = { value = 2, source = "sheet" }
nic_bandwidth_gbps = { value = 12.5, source = "sheet" }
latency_us = { value = 10, source = "sheet" }
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

TEST(PlannerHardware, NamesWhoRunsTheCollectives) {
  EXPECT_EQ(parse_cluster(kValid, "ok.toml").collectives, "strata");  // the default: this engine
  EXPECT_EQ(parse_cluster(replaced("devices_per_node = 4", "devices_per_node = 4\ncollectives = \"nccl\""), "ok.toml")
                .collectives,
            "nccl");
  expect_error(replaced("devices_per_node = 4", "devices_per_node = 4\ncollectives = \"gloo\""),
               "'cluster.collectives' must be strata, nccl or hccl");
  EXPECT_EQ(load_cluster(testing::preset_path("dgx-h100")).collectives, "nccl");
  EXPECT_EQ(load_cluster(testing::preset_path("ascend-910b")).collectives, "hccl");
}

TEST(PlannerHardware, ReadsTheMatrixEngine) {
  const ClusterSpec cluster = parse_cluster(kValid, "ok.toml");
  const DTypePerformance& bf16 = cluster.device.performance(DType::BF16);
  EXPECT_EQ(bf16.gemm.compute_units, 8);
  ASSERT_EQ(bf16.gemm.tiles.size(), 2u);
  EXPECT_EQ(bf16.gemm.tiles[0].rows, 128);
  EXPECT_EQ(bf16.gemm.tiles[0].columns, 256);
  EXPECT_DOUBLE_EQ(bf16.gemm.tiles[1].efficiency, 0.5);
  EXPECT_EQ(bf16.gemm.k_step, 32);
  EXPECT_DOUBLE_EQ(bf16.gemm.tile_overhead_s, 1e-6);
  EXPECT_DOUBLE_EQ(bf16.gemm.alignment_efficiency(1024, 64), 1.0);
  EXPECT_DOUBLE_EQ(bf16.gemm.alignment_efficiency(1022, 64), 0.5);
  EXPECT_DOUBLE_EQ(bf16.gemm.alignment_efficiency(1024, 63), 0.25);
  EXPECT_DOUBLE_EQ(bf16.attention.backward_efficiency, 0.4);
  EXPECT_EQ(bf16.attention.head_dim_step, 32);
  EXPECT_DOUBLE_EQ(bf16.sustained_matrix_flops, 0.0);  // none given: the tiles' rates stand
  const std::string capped = replaced("vector_tflops = { value = 10, source = \"sheet\" }",
                                      "vector_tflops = { value = 10, source = \"sheet\" }\n"
                                      "sustained_matrix_tflops = { value = 70, source = \"measured\" }");
  EXPECT_DOUBLE_EQ(parse_cluster(capped, "ok.toml").device.performance(DType::BF16).sustained_matrix_flops, 70e12);
}

// Every figure names where it comes from: a bare number, a missing or empty source is refused.
TEST(PlannerHardware, RefusesAFigureWithoutASource) {
  expect_error(replaced(R"(memory_gib = { value = 16, source = "sheet" })", "memory_gib = 16"),
               "key 'device.memory_gib' gives no source");
  expect_error(replaced(R"(matrix_tflops = { value = 100, source = "sheet" })", "matrix_tflops = { value = 100 }"),
               "missing key 'device.bf16.matrix_tflops.source'");
  expect_error(replaced(R"(gemm_k_step = { value = 32, source = "sheet" })", R"(gemm_k_step = { value = 32, source = "" })"),
               "device.bf16.gemm_k_step.source");
  expect_error(replaced(R"(nic_bandwidth_gbps = { value = 12.5, source = "sheet" })", "nic_bandwidth_gbps = 12.5"),
               "key 'inter_node.nic_bandwidth_gbps' gives no source");
  expect_error(replaced(R"(vector_tflops = { value = 10, source = "sheet" })",
                        "vector_tflops = { value = 10, source = \"sheet\" }\nsustained_matrix_tflops = 70"),
               "key 'device.bf16.sustained_matrix_tflops' gives no source");
}

TEST(PlannerHardware, RefusesNonsense) {
  expect_error(replaced("[intra_node]", "[intra_node]\nspeed = 1"), "unknown key 'intra_node.speed'");
  expect_error(replaced("memory_gib = { value = 16, source = \"sheet\" }\n", ""), "missing table [device.memory_gib]");
  expect_error(replaced("value = 16,", "value = -16,"), "'device.memory_gib.value' must be positive");
  expect_error(replaced("value = 1, source = \"sheet\" }\nmemory_bandwidth", "value = 16, source = \"sheet\" }\nmemory_bandwidth"),
               "must be less than memory_gib");
  expect_error(replaced("value = 0.8,", "value = 1.5,"), "must be in (0, 1]");
  expect_error(replaced("nodes = 2", "nodes = 0"), "'cluster.nodes' must be at least 1");
  expect_error(replaced("nodes = 2", "nodes = \"two\""), "'cluster.nodes' must be an integer");
  expect_error(replaced("[[128, 256, 1.0], [64, 64, 0.5]]", "[[128, 256, 1.5]]"), "efficiency must be in (0, 1]");
  expect_error(replaced("[[128, 256, 1.0], [64, 64, 0.5]]", "[[128.5, 256, 1.0]]"), "positive integers");
  expect_error(replaced("[[128, 256, 1.0], [64, 64, 0.5]]", "[]"), "at least one");
  expect_error(replaced("[[8, 1.0], [2, 0.5], [1, 0.25]]", "[[8, 1.0], [2, 0.5]]"), "must end with [1, efficiency]");
  expect_error(replaced("[[8, 1.0], [2, 0.5], [1, 0.25]]", "[[8, 1.0], [3, 0.5], [1, 0.25]]"), "must narrow");
  expect_error(replaced("value = 8, source = \"sheet\" }\ngemm_tiles", "value = 0, source = \"sheet\" }\ngemm_tiles"),
               "device.bf16.compute_units.value");
  expect_error(replaced("[device.bf16]", "[device.bf17]"), "unknown key 'device.bf17'");
  // The engine cannot hold more than its peak under sustained load.
  expect_error(replaced("vector_tflops = { value = 10, source = \"sheet\" }",
                        "vector_tflops = { value = 10, source = \"sheet\" }\n"
                        "sustained_matrix_tflops = { value = 120, source = \"sheet\" }"),
               "'device.bf16.sustained_matrix_tflops' must be at most matrix_tflops (100)");
  std::string no_network = kValid;
  no_network = no_network.substr(0, no_network.find("[inter_node]"));
  expect_error(no_network, "missing table [inter_node]");
  expect_error("[cluster\n", "invalid TOML");
}

TEST(PlannerHardware, ShippedPresetsParse) {
  for (const char* name :
       {"dgx-a100-80gb", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "grand-teton-h100", "ascend-910b", "this-machine"}) {
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
  const std::string vector_only = "[device.f32]\nvector_tflops = { value = 5, source = \"sheet\" }\n";
  ClusterSpec vector_f32 = parse_cluster(std::string(kValid) + vector_only, "x.toml");
  EXPECT_FALSE(vector_f32.device.computes(DType::F32));
  EXPECT_TRUE(vector_f32.device.computes(DType::BF16));
  expect_error(std::string(kValid) + vector_only + "gemm_k_step = { value = 8, source = \"sheet\" }\n",
               "missing table [device.f32.matrix_tflops]");
}

// Every shipped preset plans a model in its default dtype (bf16 where the matrix engine has it): the
// optimizer's f32 element-wise work is priced on every device, the Ascend's vector units included.
TEST(PlannerHardware, EveryShippedPresetPlansAModel) {
  for (const char* name :
       {"dgx-a100-80gb", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "grand-teton-h100", "ascend-910b", "this-machine"}) {
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
