// A mixture of experts in the planner against formulas worked by hand: active and total parameters,
// the all-to-all exchanges, the experts' memory under expert parallelism, the grouped GEMM at the
// busiest expert's rows, and the search choosing ep where only ep fits.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "planner/comm_pricer.h"
#include "planner/cost_model.h"
#include "planner/device_time.h"
#include "planner/expert_work.h"
#include "planner/model_comm.h"
#include "planner/search.h"
#include "planner_test_support.h"

namespace strata {
namespace {

// configs/mixtral_small.toml's model: 4 layers, width 256, 4 query and 2 key/value heads of 64, 8 experts
// of 344 picked 2 per token, vocabulary 4096, untied head.
ModelConfig mixtral_small() { return load_model_spec(std::string(STRATA_SOURCE_DIR) + "/configs/mixtral_small.toml").config; }

// A mixture of experts whose GEMMs fall on whole 64 x 64 tiles of the test device.
ModelConfig tiled_moe(int64_t experts) {
  ModelConfig c = mixtral_small();
  c.n_layer = 2;
  c.n_embd = 64;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.num_experts = experts;
  c.moe_intermediate_size = 128;
  c.vocab_size = 256;
  c.block_size = 64;
  return c;
}

// The test device with memory fast enough that every GEMM is bound by its tiles.
ClusterSpec compute_bound_cluster(int devices, double memory_gib = 64) {
  ClusterSpec cluster = testing::test_cluster(1, devices, memory_gib);
  cluster.device.memory_bandwidth_Bps *= 1e6;
  return cluster;
}

ParallelPlan plan_of(int dp, int ep, int64_t micro_batch, int64_t micro_batches) {
  ParallelPlan plan;
  plan.degrees.set("dp", dp);
  plan.degrees.set("ep", ep);
  plan.micro_batch = micro_batch;
  plan.micro_batches = micro_batches;
  return plan;
}

// A search without ZeRO or recomputation, in micro-batches of 2 rows.
PlanLimits unsharded_limits() {
  PlanLimits limits;
  limits.zero = 0;
  limits.micro_batch = 2;
  limits.recompute = RecomputeMode::None;
  return limits;
}

// dp=1 tp=`tp` ep=1, one micro-batch of 2 rows.
ParallelPlan tensor_parallel_plan(int tp, bool sp) {
  ParallelPlan plan = plan_of(1, 1, 2, 1);
  plan.degrees.set("tp", tp);
  set_sequence_parallel(plan, sp);
  return plan;
}

TEST(PlannerMoe, ActiveAndTotalParametersOfAMixtralShape) {
  const ModelConfig c = mixtral_small();
  const double C = 256, V = 4096, F = 344, E = 8, k = 2, L = 4, kv = 2 * 64;
  const double attention = C * C + 2 * C * kv + C * C;  // q, k, v, o
  const double dense_layer = attention + 2 * C + E * C;  // two RMSNorms, the router
  const double experts_layer = 3 * E * C * F;            // gate, up, down of every expert
  const double total = V * C + L * (dense_layer + experts_layer) + C + V * C;
  EXPECT_EQ(static_cast<double>(c.num_parameters()), total);
  EXPECT_EQ(active_parameters(c), total - L * (E - k) * 3 * C * F);

  const Workload work = build_workload(c, 1, 128, 1, DType::F32);
  EXPECT_EQ(work.layer.params, dense_layer + experts_layer);
  EXPECT_EQ(work.layer.expert_params, experts_layer);
}

// Model FLOPs (what MFU divides) count a token's k experts only: the layer's GEMMs do 6 FLOPs per
// active weight and token, the router's included.
TEST(PlannerMoe, ModelFlopsCountTheActiveExperts) {
  const ModelConfig c = mixtral_small();
  const double C = 256, F = 344, E = 8, k = 2, kv = 2 * 64;
  const int64_t rows = 2, seq = 128;
  const Workload work = build_workload(c, rows, seq, 1, DType::F32);
  double gemm_flops = 0;
  for (const auto* ops : {&work.layer.forward, &work.layer.backward}) {
    for (const OpWork& op : *ops) {
      if (op.kind == OpKind::Gemm) gemm_flops += op.flops;
    }
  }
  const double active_weights = C * C + 2 * C * kv + C * C + E * C + k * 3 * C * F;
  // The router's input gradient and the experts' are GEMMs too; the attention core is not a GEMM here.
  EXPECT_DOUBLE_EQ(gemm_flops, 6.0 * static_cast<double>(rows * seq) * active_weights);
}

TEST(PlannerMoe, FourAllToAllsOfThePermutedRowsPerLayerAndMicroBatch) {
  const ModelConfig c = mixtral_small();
  const int64_t micro_batch = 2, seq = 128;
  const double bytes = static_cast<double>(micro_batch * seq) * 2 /* k */ * 256 /* C */ * 2 /* bf16 */;
  const ExpertExchanges exchanges = expert_exchanges(c, micro_batch, seq, DType::BF16, 2);
  ASSERT_EQ(exchanges.forward.size(), 2u);
  ASSERT_EQ(exchanges.backward.size(), 2u);
  for (const auto* calls : {&exchanges.forward, &exchanges.backward}) {
    for (const CommCall& call : *calls) {
      EXPECT_EQ(call.pattern, CommPattern::AllToAll);
      EXPECT_EQ(call.bytes, bytes);
    }
  }
  EXPECT_TRUE(expert_exchanges(c, micro_batch, seq, DType::BF16, 1).forward.empty());

  // The step's all-to-all term: 4 per layer and micro-batch, over the 2 ep ranks next to each other.
  ModelConfig f32 = c;
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  CostModel model(PlanningProblem{"moe", f32, 8, seq, DType::F32, cluster});
  const Prediction prediction = model.evaluate(plan_of(2, 2, micro_batch, 1));
  CommPricer pricer(cluster);
  const double one = pricer.collective(comm::Collective::AllToAll, bytes * 2 /* f32 */, 2, 1, DType::F32);
  EXPECT_DOUBLE_EQ(prediction.time.comm["ep"], 4 * 4 /* layers */ * 1 /* micro-batch */ * one);
  EXPECT_EQ(model.evaluate(plan_of(4, 1, micro_batch, 1)).time.comm["ep"], 0.0);
}

TEST(PlannerMoe, ExpertParallelismHalvesTheExpertsMemory) {
  const ModelConfig c = mixtral_small();
  CostModel model(PlanningProblem{"moe", c, 8, 128, DType::F32, testing::test_cluster(1, 2, 64)});
  const double experts = 4 * 3 * 8 * 256 * 344.0;  // layers x (gate, up, down) x E x C x F
  const MemoryBreakdown replicated = model.evaluate(plan_of(2, 1, 1, 4)).memory;
  const MemoryBreakdown split = model.evaluate(plan_of(1, 2, 1, 4)).memory;
  EXPECT_DOUBLE_EQ(replicated.weights - split.weights, 4.0 * experts / 2);
  EXPECT_DOUBLE_EQ(replicated.gradients - split.gradients, 4.0 * experts / 2);
  EXPECT_DOUBLE_EQ(replicated.optimizer - split.optimizer, 2 * 4.0 * experts / 2);

  // ZeRO-1 shards the dense moments over dp x ep = 2 ranks and the experts' over dp = 1.
  ParallelPlan zero1 = plan_of(1, 2, 1, 4);
  zero1.zero = 1;
  const double params = static_cast<double>(c.num_parameters()) - experts;
  EXPECT_DOUBLE_EQ(model.evaluate(zero1).memory.optimizer, 2 * 4.0 * (params / 2 + experts / 2));
}

// ZeRO-1's weight all-gather: each layer's dense weights over dp x ep = 4 neighbouring ranks, its E/ep
// experts over the dp = 2 ranks that replicate them, ep = 2 apart; the embedding and head with the dense.
TEST(PlannerMoe, ExpertWeightsGatherOverTheDataParallelRanksAlone) {
  const ModelConfig c = mixtral_small();
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  CostModel model(PlanningProblem{"moe", c, 4, 128, DType::F32, cluster});
  ParallelPlan plan = plan_of(2, 2, 1, 1);
  plan.zero = 1;
  const Prediction prediction = model.evaluate(plan);
  const Workload work = build_workload(c, 1, 128, 1, DType::F32);
  const double dense = work.layer.params - work.layer.expert_params, experts = work.layer.expert_params / 2;
  const double root = static_cast<double>(c.num_parameters()) - 4 * work.layer.params;
  CommPricer pricer(cluster);
  const auto gather = comm::Collective::AllGather;
  const double expected = 4 * (pricer.collective(gather, 4 * dense, 4, 1) + pricer.collective(gather, 4 * experts, 2, 2)) +
                          pricer.collective(gather, 4 * root, 4, 1);
  EXPECT_DOUBLE_EQ(prediction.time.param_gather, expected);
}

// The rows the experts keep for backward: the permuted tokens [R, C], gate and up [R, F] (SwiGLU's
// inputs), its output [R, F] (the down projection's input) and the down projection's output [R, C]
// (the weighted combine's weight gradient reads it); expert parallelism sizes them for ep ranks' rows.
TEST(PlannerMoe, ExpertRowsKeptForBackwardGrowWithTheReceiveBuffer) {
  const ModelConfig c = mixtral_small();
  const double R = 2 * 128 * 2, C = 256, F = 344;
  const Workload work = build_workload(c, 2, 128, 1, DType::F32);
  EXPECT_EQ(work.layer.saved[0].expert_rows, 4 * R * (2 * C + 3 * F));
  EXPECT_EQ(build_workload(testing::small_llama_config(), 2, 16, 1, DType::F32).layer.saved[0].expert_rows, 0.0);

  // Micro-batches of 2 rows, one in flight; the head's logits [256, 4096] outweigh any layer's temporaries,
  // so only what the layers keep changes.
  CostModel model(PlanningProblem{"moe", c, 4, 128, DType::F32, testing::test_cluster(1, 2, 64)});
  const double kept_by_ep1 = model.evaluate(plan_of(2, 1, 2, 1)).memory.activations;
  const double kept_by_ep2 = model.evaluate(plan_of(1, 2, 2, 1)).memory.activations;
  EXPECT_DOUBLE_EQ(kept_by_ep2 - kept_by_ep1, 4 /* layers */ * work.layer.saved[0].expert_rows);
}

// 4 experts, 2 per token, 128 tokens: 256 rows, 64 per expert, each GEMM whole 64 x 64 tiles.
TEST(PlannerMoe, GroupedGemmAtTheBusiestExpertsRows) {
  const ModelConfig c = tiled_moe(4);
  auto expert_seconds = [&](double imbalance, int ep) {
    PlanningProblem problem{"moe", c, 2 * ep, 64, DType::F32, compute_bound_cluster(ep)};
    problem.moe_imbalance = imbalance;
    CostModel model(std::move(problem));
    const Prediction prediction = model.evaluate(plan_of(1, ep, 2, 1));
    return model.attribute(prediction).expert_gemms.seconds;
  };
  // The device: 4 units of 64 x 64 output tiles at 10/4 TFLOP/s each, a tile walking k = 64 in tile_s.
  // A GEMM over the 4 experts takes ceil(tiles / 4) waves of k / 64 tile_s. Per expert [m x n x k]:
  // gate and up [64 x 128 x 64] (8 tiles: 2 waves), down [64 x 64 x 128] (4 tiles, k 128: 2); their
  // input gradients [64 x 64 x 128] (2 each) and down's [64 x 128 x 64] (2); the weight gradients
  // [128 x 64], [128 x 64] and [64 x 128] over the expert's 64 rows (8 tiles: 2 each).
  const double tile_s = 2.0 * 64 * 64 * 64 / (10e12 / 4);
  const double expected = 2 /* layers */ * tile_s * ((2 + 2 + 2) + (2 + 2 + 2) + (2 + 2 + 2));
  EXPECT_NEAR(expert_seconds(1.0, 1), expected, 1e-9 * expected);
  EXPECT_NEAR(expert_seconds(2.0, 1), 2 * expected, 1e-9 * expected);
  // ep = 2: half the experts on a rank, twice the rows each (every rank's 256 rows over 4 experts).
  EXPECT_NEAR(expert_seconds(1.0, 2), expected, 1e-9 * expected);
}

// SwiGLU between the experts' GEMMs runs over the rank's whole receive buffer, ep ranks' rows: at ep = 2
// its forward and backward take twice the memory traffic; every other element-wise op is unchanged.
TEST(PlannerMoe, ExpertElementwiseWorkRunsOverTheReceiveBuffer) {
  const ModelConfig c = tiled_moe(4);
  const ClusterSpec cluster = testing::test_cluster(1, 2, 64);
  auto elementwise_seconds = [&](int ep) {
    CostModel model(PlanningProblem{"moe", c, 4, 64, DType::F32, cluster});
    const Prediction prediction = model.evaluate(plan_of(2 / ep, ep, 2, 1));
    return model.attribute(prediction).compute.at(OpKind::Other).seconds;
  };
  double swiglu = 0;  // one layer's, forward and backward, at one rank's rows: memory-bound on the test device
  const Workload work = build_workload(c, 2, 64, 1, DType::F32);
  for (const auto* ops : {&work.layer.forward, &work.layer.backward}) {
    for (const OpWork& op : *ops) {
      if (op.label.find("experts.act") == std::string::npos) continue;
      EXPECT_EQ(op.kind, OpKind::Other) << op.label;
      swiglu += op.bytes / cluster.device.memory_bandwidth_Bps;
    }
  }
  ASSERT_GT(swiglu, 0.0);
  EXPECT_NEAR(elementwise_seconds(2) - elementwise_seconds(1), 2 /* layers */ * swiglu, 1e-9 * swiglu);
}

// The busiest expert's rows: the mean (tokens·k/E per rank, ep ranks' worth) times the imbalance, rounded up
// to the engine's alignment (8 on the H100 and H200 presets), to which runtimes pad each expert's rows.
TEST(PlannerMoe, BusiestExpertRowsRoundUpToTheAlignment) {
  EXPECT_EQ(busiest_expert_rows(1000, ExpertLoad{8, 1, 1.05, 8}), 136);  // 131.25 rows
  EXPECT_EQ(busiest_expert_rows(1000, ExpertLoad{8, 2, 1.0, 8}), 256);   // 250
  EXPECT_EQ(busiest_expert_rows(1000, ExpertLoad{8, 1, 1.0, 1}), 125);
}

TEST(PlannerMoe, SearchChoosesExpertParallelismWhenOnlyItFits) {
  const ModelConfig c = tiled_moe(8);
  PlanLimits limits = unsharded_limits();
  limits.largest.set("tp", 1);
  limits.largest.set("pp", 1);
  CostModel sizing(PlanningProblem{"moe", c, 4, 64, DType::F32, compute_bound_cluster(2)});
  const double replicated = sizing.evaluate(plan_of(2, 1, 2, 1)).memory.peak;
  const double split = sizing.evaluate(plan_of(1, 2, 2, 1)).memory.peak;
  ASSERT_LT(split, replicated);
  const double between_gib = (split + replicated) / 2 / kGiB;
  CostModel model(PlanningProblem{"moe", c, 4, 64, DType::F32, compute_bound_cluster(2, between_gib)});
  SearchResult result = search_plans(model, limits, 4);
  ASSERT_FALSE(result.ranked.empty());
  EXPECT_EQ(result.ranked.front().plan.degree("ep"), 2);
  EXPECT_EQ(result.ranked.front().plan.describe(), "dp=1 tp=1 pp=1 ep=2 mb=2x1 zero=0 recompute=none");
  bool layout_rejected = false;
  for (const RejectedRegion& region : result.rejected) {
    for (const std::string& detail : region.details) {
      layout_rejected = layout_rejected || detail.rfind("dp=2 tp=1 pp=1: no variant fits", 0) == 0;
    }
  }
  EXPECT_TRUE(layout_rejected);
}

TEST(PlannerMoe, SearchTriesEveryExpertDegreeAndSequenceParallelism) {
  const ModelConfig c = tiled_moe(4);
  CostModel model(PlanningProblem{"moe", c, 8, 64, DType::F32, testing::test_cluster(1, 8, 64)});
  std::vector<RejectedRegion> rejected;
  std::set<int> degrees;
  bool sequence_parallel = false;
  for (const ParallelPlan& plan : enumerate_plans(model, PlanLimits{}, rejected)) {
    degrees.insert(plan.degree("ep"));
    sequence_parallel = sequence_parallel || strata::sequence_parallel(plan);
  }
  EXPECT_EQ(degrees, (std::set<int>{1, 2, 4}));  // the divisors of 4 experts (8 does not divide them)
  EXPECT_TRUE(sequence_parallel);
  ParallelPlan plan = plan_of(4, 1, 2, 1);
  plan.degrees.set("tp", 2);
  set_sequence_parallel(plan, true);
  EXPECT_FALSE(model.invalid_reason(plan).has_value()) << *model.invalid_reason(plan);
}

// Under sequence parallelism the runtime gathers the router's logits and the normed input before the router and
// the permutation (gather_to_group: forward an all-gather, backward keeps this rank's block, no call), runs the
// block whole on every tp rank, and splits its output into the residual add (split_to_group: backward an
// all-gather). The gate multiplies this rank's positions by its replicated weight, whose gradient is summed over
// the tp ranks.
TEST(PlannerMoe, SequenceParallelismGathersTheRouterAndPermutationInputs) {
  const ModelConfig c = mixtral_small();
  const int64_t b = 2, s = 128;
  const double C = 256, E = 8, bf16 = 2, positions = static_cast<double>(b * s);
  const ModelComm sp = model_comm(c, b, s, 2, true, DType::BF16);
  auto calls = [](const std::vector<CommWork>& all, const std::string& part) {
    std::vector<CommWork> found;
    for (const CommWork& call : all) {
      if (call.label.find(part) != std::string::npos) found.push_back(call);
    }
    return found;
  };
  auto expect_one = [&](const std::vector<CommWork>& all, const std::string& part, CommPattern pattern,
                        double bytes) {
    const std::vector<CommWork> found = calls(all, part);
    ASSERT_EQ(found.size(), 1u) << part;
    EXPECT_EQ(found[0].pattern, pattern) << part;
    EXPECT_EQ(found[0].bytes, bytes) << part;
    EXPECT_EQ(found[0].ranks, 2) << part;
  };
  expect_one(sp.layer.forward, "block_sparse_moe.router", CommPattern::AllGather, positions * E * bf16);
  expect_one(sp.layer.forward, "block_sparse_moe.dispatch", CommPattern::AllGather, positions * C * bf16);
  EXPECT_TRUE(calls(sp.layer.backward, "block_sparse_moe.router").empty());
  EXPECT_TRUE(calls(sp.layer.backward, "block_sparse_moe.dispatch").empty());
  expect_one(sp.layer.backward, "mlp.residual", CommPattern::AllGather, positions * C * bf16);
  expect_one(sp.layer.backward, "block_sparse_moe.gate", CommPattern::AllReduce, E * C * bf16);
  // Without sequence parallelism every tp rank holds every position: the block needs no call.
  const ModelComm whole = model_comm(c, b, s, 2, false, DType::BF16);
  for (const auto* all : {&whole.layer.forward, &whole.layer.backward}) {
    EXPECT_TRUE(calls(*all, "block_sparse_moe").empty());
    EXPECT_TRUE(calls(*all, "mlp.residual").empty());
  }
}

// Every tp rank runs the experts on every position with or without sequence parallelism; only the gate's
// three GEMMs (forward, input and weight gradients, 2·b·s·E·C FLOPs each) run on this rank's half of them.
TEST(PlannerMoe, SequenceParallelismLeavesTheExpertsWholeAndSplitsTheGate) {
  const ModelConfig c = tiled_moe(4);
  const ClusterSpec cluster = compute_bound_cluster(2);
  CostModel model(PlanningProblem{"moe", c, 2, 64, DType::F32, cluster});
  const Prediction whole = model.evaluate(tensor_parallel_plan(2, false));
  const Prediction split = model.evaluate(tensor_parallel_plan(2, true));
  const CostModel::StepAttribution at_whole = model.attribute(whole);
  const CostModel::StepAttribution at_split = model.attribute(split);
  EXPECT_EQ(at_split.expert_gemms.seconds, at_whole.expert_gemms.seconds);
  EXPECT_EQ(at_split.expert_gemms.flops, at_whole.expert_gemms.flops);
  const double layers = 2, rows = 2, seq = 64, C = 64, E = 4;
  const double gate = 3 * 2 * rows * seq * E * C;
  EXPECT_DOUBLE_EQ(at_whole.compute.at(OpKind::Gemm).flops - at_split.compute.at(OpKind::Gemm).flops,
                   layers * gate / 2);

  // The layer's all-gathers: q, k and v's inputs, the permutation's and the router's forward; the
  // reduce-scatter's conjugate and the MoE output's split backward; the rest are the embedding's and head's.
  CommPricer pricer(cluster);
  const double f32 = 4, tokens = rows * seq;
  auto gather = [&](double bytes) { return pricer.collective(comm::Collective::AllGather, bytes, 2, 1, DType::F32); };
  const double per_layer = 6 * gather(tokens * C * f32) + gather(tokens * E * f32);
  const ModelComm comm = model_comm(c, 2, 64, 2, true, DType::F32);
  double outside = 0;
  for (const auto* all : {&comm.embedding.forward, &comm.embedding.backward, &comm.head.forward, &comm.head.backward}) {
    for (const CommWork& call : *all) {
      if (call.pattern == CommPattern::AllGather) outside += gather(call.bytes);
    }
  }
  EXPECT_DOUBLE_EQ(at_split.comm_seconds("tensor-parallel all-gather"), layers * per_layer + outside);
}

// The activations a layer keeps for backward: sequence parallelism splits the four [b, s, C] values on the
// residual stream (the layer's input, the two norms' outputs, the attention's residual sum; the gate's weight
// gradient reads the second norm's output on this rank's positions), not the router's logits: the router's
// gradient reads the gathered copy, [b, s, E] whole on every rank.
TEST(PlannerMoe, SequenceParallelismKeepsTheRouterLogitsWhole) {
  const ModelConfig c = mixtral_small();
  const int64_t b = 2, s = 128;
  const double C = 256, bf16 = 2, positions = static_cast<double>(b * s);
  const ActivationBytes saved = build_workload(c, b, s, 2, DType::BF16).layer.saved[0];
  EXPECT_EQ(saved.residual, 4 * positions * C * bf16);  // the logits (b·s·E·2 more) are not among them
  EXPECT_DOUBLE_EQ(saved.total(2), saved.total(1) - 2 * positions * C * bf16);
}

// Where attention's and the residual stream's activations decide the fit, the search takes sequence parallelism
// for a mixture of experts as for a dense model.
TEST(PlannerMoe, SearchChoosesSequenceParallelismWhenOnlyItFits) {
  const ModelConfig c = tiled_moe(4);
  PlanLimits limits = unsharded_limits();
  limits.fixed.set("tp", 2);
  limits.fixed.set("pp", 1);
  limits.fixed.set("ep", 1);
  CostModel sizing(PlanningProblem{"moe", c, 2, 64, DType::F32, compute_bound_cluster(2)});
  const double whole = sizing.evaluate(tensor_parallel_plan(2, false)).memory.peak;
  const double split = sizing.evaluate(tensor_parallel_plan(2, true)).memory.peak;
  ASSERT_LT(split, whole);
  CostModel model(PlanningProblem{"moe", c, 2, 64, DType::F32, compute_bound_cluster(2, (split + whole) / 2 / kGiB)});
  SearchResult result = search_plans(model, limits, 4);
  ASSERT_EQ(result.ranked.size(), 1u);
  EXPECT_TRUE(sequence_parallel(result.ranked.front().plan)) << result.ranked.front().plan.describe();
}

TEST(PlannerMoe, DenseModelsSearchNoExpertParallelism) {
  CostModel model(PlanningProblem{"llama", testing::small_llama_config(), 8, 16, DType::F32,
                                  testing::test_cluster(1, 4, 64)});
  std::vector<RejectedRegion> rejected;
  for (const ParallelPlan& plan : enumerate_plans(model, PlanLimits{}, rejected)) EXPECT_EQ(plan.degree("ep"), 1);
  PlanLimits fixed;
  fixed.fixed.set("ep", 2);
  SearchResult result = search_plans(model, fixed, 1);
  EXPECT_TRUE(result.ranked.empty());
  ASSERT_FALSE(result.rejected.empty());
  EXPECT_EQ(result.rejected.front().reason, "expert parallelism for a model without experts");
  EXPECT_EQ(*model.invalid_reason(plan_of(2, 2, 1, 2)), "expert parallelism 2 for a model without experts");
}

TEST(PlannerMoe, ImbalanceBelowOneIsRefused) {
  PlanningProblem problem{"moe", mixtral_small(), 8, 128, DType::F32, testing::test_cluster(1, 2, 64)};
  problem.moe_imbalance = 0.5;
  try {
    CostModel model(std::move(problem));
    FAIL() << "an imbalance of 0.5 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--moe-imbalance"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
