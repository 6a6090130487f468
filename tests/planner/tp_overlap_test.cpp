// Sequence parallelism's collectives beside the layer's GEMMs (tp_overlap.h): the chunked schedules against
// their hand formulas, and through the cost model, a layer whose GEMM chunks outlast their transfers hides its
// gathers and reduce-scatters but for what the schedules leave exposed and the compute units they take.
#include "planner/tp_overlap.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/comm_pricer.h"
#include "planner/cost_model.h"
#include "planner/device_time.h"
#include "planner_test_support.h"

namespace strata {
namespace {

TEST(PlannerTpOverlap, RingExchangeHidesEachTransferBehindOneShardsGemm) {
  // 4 ranks: 4 GEMM steps of 2 s, 3 transfers of 1 s each beside the first three: the GEMM's 8 s.
  EXPECT_DOUBLE_EQ(ring_exchange_seconds(8, 3, 4), 8);
  // Transfers of 3 s: the first step, then three transfers each outlasting its step: 1 + 3 x 3.
  EXPECT_DOUBLE_EQ(ring_exchange_seconds(4, 9, 4), 10);
  EXPECT_DOUBLE_EQ(ring_exchange_seconds(4, 9, 1), 4);  // no group: the GEMM alone
}

TEST(PlannerTpOverlap, PipelinedReduceScatterLeavesTheLastChunksTransfer) {
  // 4 splits of an 8 s GEMM and a 4 s reduce-scatter: 2 + 3 x max(2, 1) + 1.
  EXPECT_DOUBLE_EQ(pipelined_seconds(8, 4, 4), 9);
  // A 16 s reduce-scatter: 2 + 3 x 4 + 4.
  EXPECT_DOUBLE_EQ(pipelined_seconds(8, 16, 4), 18);
  EXPECT_DOUBLE_EQ(bulk_seconds(8, 3), 8);
  EXPECT_DOUBLE_EQ(bulk_seconds(8, 11), 11);
}

TEST(PlannerTpOverlap, CommunicationSmsSlowTheGemmBesideThem) {
  // 24 of an H100's 132 SMs taken: the GEMM on 108.
  EXPECT_DOUBLE_EQ(with_units_taken(10, 24, 132), 10.0 * 132 / 108);
  EXPECT_DOUBLE_EQ(with_units_taken(10, 0, 132), 10);
  EXPECT_THROW(with_units_taken(10, 132, 132), Error);
}

TEST(PlannerTpOverlap, FlagsTakeTransformerEnginesNamesAndRefuseOthers) {
  const TpOverlap overlap = parse_tp_overlap("userbuffers", "proj_fprop=24,fc2_fprop=20");
  EXPECT_EQ(overlap.runtime, TpOverlapRuntime::Userbuffers);
  EXPECT_EQ(userbuffers_comm_units(overlap, "proj_fprop"), 24);
  EXPECT_EQ(userbuffers_comm_units(overlap, "fc2_fprop"), 20);
  EXPECT_EQ(userbuffers_comm_units(overlap, "qkv_wgrad"), 16);  // initialize_ub's default for bulk
  EXPECT_EQ(userbuffers_comm_units(overlap, "qkv_fprop"), 1);   // and for ring exchange
  EXPECT_EQ(parse_tp_overlap("async-tp", "").runtime, TpOverlapRuntime::AsyncTp);
  EXPECT_THROW(parse_tp_overlap("ring", ""), Error);
  EXPECT_THROW(parse_tp_overlap("userbuffers", "qkv_dgrad=4"), Error);
  EXPECT_THROW(parse_tp_overlap("userbuffers", "proj_fprop=-1"), Error);
  EXPECT_THROW(parse_tp_overlap("async-tp", "proj_fprop=2"), Error);
}

// A Llama of width 2048 at tp = 2 with sequence parallelism on a link so fast that a transfer is its latency
// and, for a reduce-scatter, its sum in memory: each GEMM chunk (0.2 ms and more) outlasts it.
constexpr int64_t kBatch = 2, kSeq = 512;
constexpr int kLayers = 4, kMicroBatches = 2;

ModelConfig wide_llama() {
  ModelConfig config = testing::small_llama_config();
  config.n_embd = 2048;
  config.intermediate_size = 8192;
  config.block_size = kSeq;
  return config;
}

struct Priced {
  double gathers = 0, scatters = 0;
  double forward_scatter = 0;  // one forward reduce-scatter's
};
Priced tensor_parallel_terms(const ClusterSpec& cluster, const TpOverlap& overlap,
                             TensorParallelInput input = TensorParallelInput::Shared) {
  PlanningProblem problem{"llama", wide_llama(), kBatch * kMicroBatches, kSeq, DType::F32, cluster};
  problem.tp_input = input;
  problem.tp_overlap = overlap;
  CostModel model(problem);
  ParallelPlan plan;
  plan.degrees.set("tp", 2);
  set_sequence_parallel(plan, true);
  plan.micro_batch = kBatch;
  plan.micro_batches = kMicroBatches;
  const CostModel::StepAttribution parts = model.attribute(model.evaluate(plan));
  return {parts.comm_seconds("tensor-parallel all-gather"), parts.comm_seconds("tensor-parallel reduce-scatter"), 0};
}

// The layer's gathers and reduce-scatters, exposed, summed over its forward and backward (one micro-batch).
Priced layer_collectives(const ClusterSpec& cluster) {
  CommPricer pricer(cluster);
  const ModelComm comm = model_comm(wide_llama(), kBatch, kSeq, 2, true, DType::F32, TensorParallelInput::Shared);
  Priced sums;
  for (const auto* calls : {&comm.layer.forward, &comm.layer.backward}) {
    for (const CommWork& call : *calls) {
      const double seconds = pricer.collective(call.pattern, call.bytes, call.ranks, 1, call.dtype);
      if (call.pattern == CommPattern::AllGather) sums.gathers += seconds;
      if (call.pattern == CommPattern::ReduceScatter) sums.scatters += seconds;
      if (call.pattern == CommPattern::ReduceScatter && calls == &comm.layer.forward) sums.forward_scatter = seconds;
    }
  }
  return sums;
}

TEST(PlannerTpOverlap, AsyncTpHidesEveryLayerCollectiveBehindLongerGemmChunks) {
  const ClusterSpec cluster = testing::test_cluster(1, 2, 1000, 10, 1e6);
  const Priced exposed = tensor_parallel_terms(cluster, {});
  const Priced hidden = tensor_parallel_terms(cluster, parse_tp_overlap("async-tp", ""));
  const Priced layer = layer_collectives(cluster);
  const double steps = kLayers * kMicroBatches;
  EXPECT_NEAR(exposed.gathers - hidden.gathers, steps * layer.gathers, 1e-9 * exposed.gathers);
  EXPECT_NEAR(exposed.scatters - hidden.scatters, steps * layer.scatters, 1e-9 * exposed.scatters);
}

// Userbuffers with no SMs taken but the attention output projection's pipelined reduce-scatter's one (of the
// test device's 4): that GEMM runs 4/3 as long, and each forward reduce-scatter leaves its last quarter.
TEST(PlannerTpOverlap, UserbuffersLeavesThePipelinesLastChunkAndTheSmsTaken) {
  const ClusterSpec cluster = testing::test_cluster(1, 2, 1000, 10, 1e6);
  const std::string none = "qkv_fprop=0,fc1_fprop=0,proj_dgrad=0,fc2_dgrad=0,fc2_fprop=0,qkv_wgrad=0,fc1_wgrad=0";
  const Priced exposed = tensor_parallel_terms(cluster, {});
  const Priced overlapped = tensor_parallel_terms(cluster, parse_tp_overlap("userbuffers", none + ",proj_fprop=1"));
  const Priced layer = layer_collectives(cluster);
  CostModel model(PlanningProblem{"llama", wide_llama(), kBatch, kSeq, DType::F32, cluster});
  std::vector<const OpWork*> linears;
  for (const OpWork& op : model.workload(kBatch, 2).layer.forward) {
    if (op.kind == OpKind::Gemm && op.gemm.batch == 1) linears.push_back(&op);
  }
  ASSERT_EQ(linears.size(), 7u);  // q, k, v, o; gate, up, down
  const double projection = op_seconds(*linears[3], cluster.device, DType::F32);
  const double steps = kLayers * kMicroBatches;
  EXPECT_NEAR(exposed.gathers - overlapped.gathers, steps * layer.gathers, 1e-9 * exposed.gathers);
  const double left = projection / 3 + 2 * layer.forward_scatter / 4;
  EXPECT_NEAR(exposed.scatters - overlapped.scatters, steps * (layer.scatters - left), 1e-9 * exposed.scatters);
}

// A Llama entering the region once per linear gathers before each of q, k, v and gate, up: its collectives do not
// pair one to one with the linears, and stay exposed.
TEST(PlannerTpOverlap, CollectivesThatDoNotPairWithTheLinearsStayExposed) {
  const ClusterSpec cluster = testing::test_cluster(1, 2, 1000, 10, 1e6);
  const Priced exposed = tensor_parallel_terms(cluster, {}, TensorParallelInput::PerLinear);
  const Priced overlapped =
      tensor_parallel_terms(cluster, parse_tp_overlap("async-tp", ""), TensorParallelInput::PerLinear);
  EXPECT_DOUBLE_EQ(overlapped.gathers, exposed.gathers);
  EXPECT_DOUBLE_EQ(overlapped.scatters, exposed.scatters);
}

// Tensor parallelism over two nodes of one device each: no peer buffers across nodes, nothing overlapped.
TEST(PlannerTpOverlap, GroupsAcrossNodesStayExposed) {
  const ClusterSpec cluster = testing::test_cluster(2, 1, 1000, 1e6, 1e6);
  const Priced exposed = tensor_parallel_terms(cluster, {});
  const Priced overlapped = tensor_parallel_terms(cluster, parse_tp_overlap("async-tp", ""));
  EXPECT_GT(exposed.gathers, 0);
  EXPECT_DOUBLE_EQ(overlapped.gathers, exposed.gathers);
  EXPECT_DOUBLE_EQ(overlapped.scatters, exposed.scatters);
}

}  // namespace
}  // namespace strata
