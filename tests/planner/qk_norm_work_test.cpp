// OLMo 2's QK-norm (qk_norm_work.h) against RMSNorm's traffic worked out by hand: forward the rows read and written
// and the weight read, backward the rows and their gradient read, the gradient written, the weight read and its
// gradient written; over all of q (n_head * head_dim) and all of k (n_kv_head * head_dim), the heads this rank holds;
// priced at the device's measured RMSNorm efficiency; refused, naming the flag, for a layer without RMSNorm.
#include "planner/qk_norm_work.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "planner/device_time.h"
#include "planner/hardware.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

TEST(PlannerQkNorm, NormsAllOfQAndKAsRmsNormMovesThem) {
  const ModelConfig config = testing::small_llama_config();  // 4 heads, 2 key/value heads, head dim 8
  const double a = 2;                                         // bf16
  const double rows = 2.0 * 16;                               // micro-batch 2 of 16 positions
  for (int tp : {1, 2}) {
    Workload work = build_workload(config, 2, 16, tp, DType::BF16);
    const size_t forward_ops = work.layer.forward.size(), backward_ops = work.layer.backward.size();
    add_qk_norm(work.layer, config, tp);
    EXPECT_EQ(work.layer.forward.size(), forward_ops + 2);
    EXPECT_EQ(work.layer.backward.size(), backward_ops + 2);
    const double q = 4.0 * 8 / tp, k = 2.0 * 8 / tp;
    for (const auto& [name, width] : {std::pair<std::string, double>{"q", q}, {"k", k}}) {
      const OpWork& forward = testing::op_labelled(work.layer.forward, "self_attn." + name + "_norm");
      const OpWork& backward = testing::op_labelled(work.layer.backward, "self_attn." + name + "_norm.grad_x");
      EXPECT_EQ(forward.op, "rms_norm");
      EXPECT_EQ(backward.op, "rms_norm_backward");
      EXPECT_DOUBLE_EQ(forward.bytes, rows * width * 2 * a + width * a) << name << " at tp " << tp;
      EXPECT_DOUBLE_EQ(backward.bytes, rows * width * 3 * a + 2 * width * a) << name << " at tp " << tp;
      EXPECT_FALSE(forward.residual_stream);  // q and k are split by heads, not by sequence parallelism
    }
  }
}

TEST(PlannerQkNorm, PricedAtTheDevicesRmsNormEfficiency) {
  const ClusterSpec h100 = load_cluster(testing::preset_path("dgx-h100"));
  const DeviceSpec& device = h100.device;
  const double efficiency = device.performance(DType::BF16).op_efficiency.at("rms_norm");
  const ModelConfig config = testing::small_llama_config();
  Workload work = build_workload(config, 8, 16, 1, DType::BF16);
  add_qk_norm(work.layer, config, 1);
  const OpWork& q_norm = testing::op_labelled(work.layer.forward, "self_attn.q_norm");
  const double by_hand =
      (device.op_overhead_s + q_norm.bytes / (device.memory_bandwidth_Bps * device.memory_efficiency)) / efficiency;
  EXPECT_NEAR(op_seconds(q_norm, device, DType::BF16), by_hand, 1e-15);
}

TEST(PlannerQkNorm, RefusesALayerWithoutRmsNormNamingTheFlag) {
  const ModelConfig gpt2 = model_preset("gpt2-small").config;
  Workload work = build_workload(gpt2, 1, 64, 1, DType::BF16);
  try {
    add_qk_norm(work.layer, gpt2, 1);
    ADD_FAILURE() << "priced QK-norm on a LayerNorm layer";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--qk-norm"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("gpt2"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace strata
