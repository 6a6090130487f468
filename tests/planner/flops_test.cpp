// FLOP counts of the planner's per-device workload against closed forms for
// GPT models and against the whole-model graph Strata trains.
#include <gtest/gtest.h>

#include "model/model_graph.h"
#include "planner/cost_model.h"
#include "planner/workload.h"
#include "planner_test_support.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

double flops_of(const std::vector<OpWork>& ops, OpKind kind) {
  double total = 0;
  for (const OpWork& op : ops) {
    if (op.kind == kind) total += op.flops;
  }
  return total;
}

double all_flops(const std::vector<OpWork>& ops) {
  double total = 0;
  for (const OpWork& op : ops) total += op.flops;
  return total;
}

ModelConfig small_config() { return testing::gpt2_config(3, 4, 128, 1000, 64); }

TEST(PlannerFlops, PerDeviceSegmentsAddUpToTheTrainingGraph) {
  ModelConfig c = small_config();
  for (int64_t batch : {1, 3}) {
    Workload w = build_workload(c, batch, 48, 1, DType::F32);
    double segments = all_flops(w.embedding.forward) + all_flops(w.embedding.backward) + all_flops(w.head.forward) +
                      all_flops(w.head.backward) + w.tied_gradient_sum.flops +
                      static_cast<double>(c.n_layer) * (all_flops(w.layer.forward) + all_flops(w.layer.backward));
    ModelGraph graph = build_model_graph(c, batch, 48, true);
    EXPECT_DOUBLE_EQ(segments, graph.graph.total_cost().flops) << "batch " << batch;
  }
}

TEST(PlannerFlops, GemmFlopsMatchTheClosedFormAndBackwardIsTwiceForward) {
  // Per layer forward: 2 T (3h^2 + h^2 + 4h^2 + 4h^2) = 24 T h^2 multiply-adds x 2, plus one add
  // per output for the biases (9 T h); backward: input and weight gradients, twice that GEMM work.
  ModelConfig c = small_config();
  const double b = 2, s = 40, h = static_cast<double>(c.n_embd), tokens = b * s;
  Workload w = build_workload(c, 2, 40, 1, DType::F32);
  EXPECT_DOUBLE_EQ(flops_of(w.layer.forward, OpKind::Gemm), 24 * tokens * h * h + 9 * tokens * h);
  EXPECT_DOUBLE_EQ(flops_of(w.layer.backward, OpKind::Gemm), 2 * 24 * tokens * h * h);
  // Causal attention: QK^T and PV over the lower triangle, 2 x 2 b (s (s+1) / 2) h;
  // the flash-style backward recomputes the scores: 2.5 times the forward.
  double attention = 4 * b * (s * (s + 1) / 2) * h;
  EXPECT_DOUBLE_EQ(flops_of(w.layer.forward, OpKind::Attention), attention);
  EXPECT_DOUBLE_EQ(flops_of(w.layer.backward, OpKind::Attention), 2.5 * attention);
  // LM head: 2 T h V forward, twice that backward.
  double vocab = static_cast<double>(c.vocab_size);
  EXPECT_DOUBLE_EQ(flops_of(w.head.forward, OpKind::Gemm), 2 * tokens * h * vocab);
  EXPECT_DOUBLE_EQ(flops_of(w.head.backward, OpKind::Gemm), 4 * tokens * h * vocab);
}

TEST(PlannerFlops, ModelFlopsFollowNarayananWithCausalAttention) {
  // Narayanan et al. count 72 B L s h^2 (1 + s/(6h) + V/(12 h L)) per step without recomputation:
  // the GEMMs are 72 B L s h^2 (1 + V/(12 h L)) and the rest full (not causal) attention.
  ModelConfig c = small_config();
  const double B = 6, s = 64, h = 128, L = 3, V = 1000;
  CostModel model(PlanningProblem{"t", c, 6, 64, DType::F32, testing::test_cluster(1, 1, 64)});
  Workload w = build_workload(c, 1, 64, 1, DType::F32);
  double gemm_in_model = B * (L * (flops_of(w.layer.forward, OpKind::Gemm) + flops_of(w.layer.backward, OpKind::Gemm)) +
                              flops_of(w.head.forward, OpKind::Gemm) + flops_of(w.head.backward, OpKind::Gemm));
  // Strata's linear op also counts its bias add: 9 h per token and layer, forward only.
  EXPECT_DOUBLE_EQ(gemm_in_model, 72 * B * L * s * h * h * (1 + V / (12 * h * L)) + 9 * B * L * s * h);
  double causal_attention = 3.5 * 4 * B * (s * (s + 1) / 2) * h * L;
  double rest = model.model_flops_per_step() - gemm_in_model - causal_attention;
  EXPECT_GT(rest, 0);  // layer norms, GELU, residual adds, softmax cross-entropy
  EXPECT_LT(rest, 0.05 * model.model_flops_per_step());
}

TEST(PlannerFlops, RecomputationAddsForwardWork) {
  ModelConfig c = small_config();
  const double B = 4, s = 32, h = 128, L = 3;
  CostModel model(PlanningProblem{"t", c, 4, 32, DType::F32, testing::test_cluster(1, 1, 64)});
  auto hardware = [&](RecomputeMode mode) {
    ParallelPlan plan;
    plan.micro_batch = 4;
    plan.recompute = mode;
    return model.evaluate(plan).hardware_flops;
  };
  double T = B * s;
  // Full: the whole layer forward again: GEMMs with biases, attention, two layer norms
  // (8 per element), GELU (10 per element of 4h), two residual adds.
  double layer_forward =
      24 * T * h * h + 9 * T * h + 4 * B * (s * (s + 1) / 2) * h + 2 * 8 * T * h + 10 * 4 * T * h + 2 * T * h;
  EXPECT_DOUBLE_EQ(hardware(RecomputeMode::None), model.model_flops_per_step());
  EXPECT_DOUBLE_EQ(hardware(RecomputeMode::Full) - model.model_flops_per_step(), L * layer_forward);
  // Selective: the attention core only (as the trainer's recomputation pass does).
  double selective = 4 * B * (s * (s + 1) / 2) * h;
  EXPECT_DOUBLE_EQ(hardware(RecomputeMode::Selective) - model.model_flops_per_step(), L * selective);
}

TEST(PlannerFlops, TensorParallelismSplitsTheShardedWork) {
  ModelConfig c = small_config();
  Workload whole = build_workload(c, 2, 32, 1, DType::F32);
  Workload shard = build_workload(c, 2, 32, 4, DType::F32);
  // GEMM weights split four ways; the row-parallel projections still add their full bias.
  double h = 128, T = 64;
  EXPECT_DOUBLE_EQ(flops_of(shard.layer.forward, OpKind::Gemm),
                   24 * T * h * h / 4 + (3 * h / 4 + h + 4 * h / 4 + h) * T);
  EXPECT_DOUBLE_EQ(flops_of(shard.layer.forward, OpKind::Attention),
                   flops_of(whole.layer.forward, OpKind::Attention) / 4);
  // Replicated on every shard: the two norms (4h) and the projections' biases (2h).
  EXPECT_DOUBLE_EQ(shard.layer.params * 4 - whole.layer.params, (4 - 1) * (4 * h + 2 * h));
  EXPECT_THROW(build_workload(c, 2, 32, 3, DType::F32), Error);  // 3 does not divide 4 heads
}

}  // namespace
}  // namespace strata
