#pragma once
// Small clusters for planner tests, described in the same TOML users write, and sums over their work lists.
#include <fmt/format.h>

#include <functional>

#include <stdexcept>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/hardware.h"
#include "planner/model_spec.h"
#include "planner/workload.h"

namespace strata::testing {

// The memory traffic of a list of ops.
inline double bytes_of(const std::vector<OpWork>& ops) {
  double total = 0;
  for (const OpWork& op : ops) total += op.bytes;
  return total;
}

// The op of a work list with this label (a test's failure, naming it, when there is none).
inline const OpWork& op_labelled(const std::vector<OpWork>& ops, const std::string& label) {
  for (const OpWork& op : ops) {
    if (op.label == label) return op;
  }
  throw std::runtime_error("no op labelled " + label);
}

// A made-up f32 device: 10 TFLOP/s matrix on 4 units in 64 x 64 tiles, 1 TFLOP/s vector, 100 GB/s memory.
inline ClusterSpec test_cluster(int nodes, int devices_per_node, double memory_gib, double nic_gbps = 10,
                                double intra_gbps = 100) {
  std::string text = fmt::format(R"(
[cluster]
name = "test"
nodes = {}
devices_per_node = {}
[device]
name = "unit"
memory_gib = {{ value = {}, source = "test" }}
reserved_gib = {{ value = 0, source = "test" }}
memory_bandwidth_gbps = {{ value = 100, source = "test" }}
memory_efficiency = {{ value = 1, source = "test" }}
op_overhead_us = {{ value = 0, source = "test" }}
[device.f32]
matrix_tflops = {{ value = 10, source = "test" }}
vector_tflops = {{ value = 1, source = "test" }}
compute_units = {{ value = 4, source = "test" }}
gemm_tiles = {{ value = [[64, 64, 1.0]], source = "test" }}
gemm_k_step = {{ value = 1, source = "test" }}
gemm_tile_overhead_us = {{ value = 0, source = "test" }}
gemm_alignment = {{ value = [[1, 1.0]], source = "test" }}
attention_efficiency = {{ value = 0.5, source = "test" }}
attention_backward_efficiency = {{ value = 0.5, source = "test" }}
attention_block_rows = {{ value = 64, source = "test" }}
attention_head_dim_step = {{ value = 1, source = "test" }}
attention_tile_overhead_us = {{ value = 0, source = "test" }}
[intra_node]
bandwidth_gbps = {{ value = {}, source = "test" }}
latency_us = {{ value = 1, source = "test" }}
[inter_node]
nics_per_node = {{ value = 1, source = "test" }}
nic_bandwidth_gbps = {{ value = {}, source = "test" }}
latency_us = {{ value = 5, source = "test" }}
)",
                                 nodes, devices_per_node, memory_gib, intra_gbps, nic_gbps);
  return parse_cluster(text, "test.toml");
}

// The compute seconds of one step of `config` on test_cluster's device (f32, one device, one micro-batch of
// `batch` rows of `seq` tokens), after `adjust` has set the problem's runtime options: what a runtime mechanism
// adds is the difference of two such steps.
inline double f32_step_compute_s(const ModelConfig& config, int64_t batch, int64_t seq,
                                 const std::function<void(PlanningProblem&)>& adjust) {
  PlanningProblem problem{"llama", config, batch, seq, DType::F32, test_cluster(1, 1, 16)};
  adjust(problem);
  CostModel model(problem);
  ParallelPlan plan;
  plan.micro_batch = batch;
  return model.evaluate(plan).time.compute;
}

// A small Llama: 4 layers, width 32, 4 query and 2 key/value heads, MLP 48, 16 tokens, vocabulary 4099.
inline ModelConfig small_llama_config() {
  ModelConfig config = model_preset("llama3-8b").config;
  config.n_layer = 4;
  config.n_head = 4;
  config.n_kv_head = 2;
  config.n_embd = 32;
  config.intermediate_size = 48;
  config.vocab_size = 4099;
  config.block_size = 16;
  return config;
}

inline std::string preset_path(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/configs/clusters/" + name + ".toml";
}

}  // namespace strata::testing
