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

void expect_schedule(const Schedule& schedule, double seconds, double beside) {
  EXPECT_DOUBLE_EQ(schedule.seconds, seconds);
  EXPECT_DOUBLE_EQ(schedule.beside, beside);
}

TEST(PlannerTpOverlap, RingExchangeHidesEachTransferBehindOneShardsGemm) {
  // 4 ranks: 4 chunks of 2 s, 3 transfers of 1 s each beside the chunk after it: 8 s, 3 s of it beside.
  expect_schedule(ring_exchange(2, 3, 4), 8, 3);
  // Transfers of 3 s: the first chunk, then three transfers each outlasting its 1 s chunk: 1 + 3 x 3, 3 x 1 beside.
  expect_schedule(ring_exchange(1, 9, 4), 10, 3);
  expect_schedule(ring_exchange(4, 9, 1), 4, 0);  // no group: the GEMM alone
}

TEST(PlannerTpOverlap, PipelinedReduceScatterLeavesTheLastChunksTransfer) {
  // 4 chunks of 2 s and a 4 s reduce-scatter: 2 + 3 x max(2, 1) + 1, three 1 s transfers beside a chunk.
  expect_schedule(pipelined(2, 4, 4), 9, 3);
  // A 16 s reduce-scatter: 2 + 3 x 4 + 4, each of three transfers beside a whole 2 s chunk.
  expect_schedule(pipelined(2, 16, 4), 18, 6);
  expect_schedule(bulk(8, 3), 8, 3);
  expect_schedule(bulk(8, 11), 11, 8);
}

// A layer's four paired calls under each runtime, with made-up times: linears qkv 6 s (3 GEMMs), proj 2 s,
// fc1 8 s (2 GEMMs), fc2 4 s; a chunk of 1/parts of a linear's rows costs its share and 0.5 s more (a wave
// left part-full, the launch); a pass through memory 1 ms per byte-thousand; each collective 1 s of 100 bytes
// over 2 ranks; compute beside a transfer 20% slower.
struct MadeUpLayer {
  std::vector<double> linears{6, 2, 8, 4};
  std::vector<int> gemms{3, 1, 2, 1};
  std::vector<double> collective{1, 1, 1, 1};
  std::vector<CommWork> forward{{"ag", CommPattern::AllGather, 100, 2, DType::BF16},
                                {"rs", CommPattern::ReduceScatter, 100, 2, DType::BF16},
                                {"ag", CommPattern::AllGather, 100, 2, DType::BF16},
                                {"rs", CommPattern::ReduceScatter, 100, 2, DType::BF16}};
  std::vector<CommWork> backward{forward[0], forward[1], forward[2], forward[3]};
  std::vector<double> overlapped(const TpOverlap& overlap, bool in_backward) const {
    auto chunk = [this](size_t linear, int parts) { return linears[linear] / parts + 0.5; };
    auto memory = [](double bytes, double) { return bytes * 1e-3; };
    const OverlapInput input{overlap, linears, gemms, chunk, memory, 2, 132, 0.2};
    return overlapped_seconds(input, in_backward ? backward : forward, collective, in_backward);
  }
};

TEST(PlannerTpOverlap, AsyncTpPaysChunkShapesCopiesTheFinalSumAndContention) {
  const MadeUpLayer layer;
  const TpOverlap async_tp = parse_tp_overlap("async-tp", "");
  // Forward. qkv's gather: the local 50-byte shard copied (read and written: 0.1 s), two 3.5 s chunks, the one
  // 1 s transfer beside the second at 20%: 0.1 + 7 + 0.2 - 6. proj's reduce-scatter: two 1.5 s chunks, the
  // transfer beside, then the partial shards added (two read, one written: 0.15 s): 3 + 0.2 + 0.15 - 2.
  const std::vector<double> forward = layer.overlapped(async_tp, false);
  ASSERT_EQ(forward.size(), 4u);
  EXPECT_NEAR(forward[0], 0.1 + 7 + 0.2 - 6, 1e-12);
  EXPECT_NEAR(forward[1], 3 + 0.2 + 0.15 - 2, 1e-12);
  EXPECT_NEAR(forward[2], 0.1 + 9 + 0.2 - 8, 1e-12);
  EXPECT_NEAR(forward[3], 5 + 0.2 + 0.15 - 4, 1e-12);
  // Backward: fc2's and proj's input gradients gathered as in forward; fc1's and qkv's reduce-scatters take the
  // sum of 2 and 3 GEMMs' input gradients, which micro_pipeline_tp does not fuse: exposed, 1 s each.
  const std::vector<double> backward = layer.overlapped(async_tp, true);
  ASSERT_EQ(backward.size(), 4u);
  EXPECT_NEAR(backward[0], 0.1 + 5 + 0.2 - 4, 1e-12);
  EXPECT_DOUBLE_EQ(backward[1], 1);
  EXPECT_NEAR(backward[2], 0.1 + 3 + 0.2 - 2, 1e-12);
  EXPECT_DOUBLE_EQ(backward[3], 1);
  // One GEMM behind each input (a fused qkv, a plain MLP): its backward reduce-scatter is fused like forward's.
  MadeUpLayer fused = layer;
  fused.gemms = {1, 1, 1, 1};
  const std::vector<double> fused_backward = fused.overlapped(async_tp, true);
  EXPECT_NEAR(fused_backward[1], 9 + 0.2 + 0.15 - 8, 1e-12);
  EXPECT_NEAR(fused_backward[3], 7 + 0.2 + 0.15 - 6, 1e-12);
}

TEST(PlannerTpOverlap, UserbuffersPaysTheLargerOfItsSmsTakenAndTheContention) {
  const MadeUpLayer layer;
  const std::vector<double> forward = layer.overlapped(parse_tp_overlap("userbuffers", ""), false);
  ASSERT_EQ(forward.size(), 4u);
  // qkv_fprop by ring exchange on 131 of 132 SMs: 2 x 3.5 x 132/131 = 7.053 s, below the chunks beside a 20%
  // slower transfer (7 + 0.2).
  EXPECT_NEAR(forward[0], 7 + 0.2 - 6, 1e-12);
  // proj_fprop pipelined in 4 chunks of 2/4 + 0.5 s on 116 SMs: 4 x 132/116 + 1/4 = 4.80 s, above the contended
  // 4 + 1/4 + 0.2 x 3 x 1/4 = 4.4 s.
  EXPECT_NEAR(forward[1], 4.0 * 132 / 116 + 0.25 - 2, 1e-12);
  // Backward: qkv_wgrad's bulk reduce-scatter beside the whole 6 s GEMM on 116 SMs: 6 x 132/116 > 6 + 0.2 x 1.
  const std::vector<double> backward = layer.overlapped(parse_tp_overlap("userbuffers", ""), true);
  ASSERT_EQ(backward.size(), 4u);
  EXPECT_NEAR(backward[3], 6.0 * 132 / 116 - 6, 1e-12);
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
constexpr int64_t kBatch = 2, kSeq = 544;  // 1088 rows: 17 tiles of 64, a chunk of half 9
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
  double bytes = 0;            // one call's whole buffer (all of the layer's are the width by the tokens)
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
  return {parts.comm_seconds("tensor-parallel all-gather"), parts.comm_seconds("tensor-parallel reduce-scatter")};
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
      if (call.pattern == CommPattern::AllGather) sums.bytes = call.bytes;
    }
  }
  return sums;
}

// The layer's linears at tp = 2 (q, k, v, o; gate, up, down) and what cutting some of them into `parts` row
// chunks, each GEMM's own (gemm_seconds at the chunk's shape, `slower` for SMs taken), adds to their whole time.
struct Linears {
  const ClusterSpec& cluster;
  std::vector<OpWork> ops;
  double excess(std::initializer_list<size_t> which, int parts, double slower = 1) const {
    double seconds = 0;
    for (size_t i : which) {
      const GemmShape& g = ops[i].gemm;
      const double chunk = gemm_seconds({1, g.m / parts, g.n, g.k}, cluster.device, DType::F32);
      seconds += parts * chunk * slower - op_seconds(ops[i], cluster.device, DType::F32);
    }
    return seconds;
  }
};
Linears layer_linears(const ClusterSpec& cluster) {
  CostModel model(PlanningProblem{"llama", wide_llama(), kBatch, kSeq, DType::F32, cluster});
  Linears linears{cluster, {}};
  for (const OpWork& op : model.workload(kBatch, 2).layer.forward) {
    if (op.kind == OpKind::Gemm && op.gemm.batch == 1) linears.ops.push_back(op);
  }
  EXPECT_EQ(linears.ops.size(), 7u);
  return linears;
}
constexpr double kTestBandwidth = 100e9;  // test_cluster's memory, at full efficiency and no launch cost

// Each transfer here is shorter than the chunk beside it. What async TP leaves per layer: each gather (q, k, v's
// and gate, up's forward; down's and o's input gradients') its local shard's copy (read and written) and its two
// chunks' excess over the whole GEMMs; each forward reduce-scatter (o's, down's) the same chunks' excess and the
// sum of the two ranks' partial shards (two read, one written); the backward reduce-scatters take q, k, v's and
// gate, up's summed input gradients, which the pass does not fuse: they stay exposed.
TEST(PlannerTpOverlap, AsyncTpLeavesTheChunksExcessTheShardCopiesAndTheFinalSums) {
  const ClusterSpec cluster = testing::test_cluster(1, 2, 1000, 10, 1e6);
  const Priced exposed = tensor_parallel_terms(cluster, {});
  const Priced hidden = tensor_parallel_terms(cluster, parse_tp_overlap("async-tp", ""));
  const Priced layer = layer_collectives(cluster);
  const Linears linears = layer_linears(cluster);
  const double shard = layer.bytes / 2;
  const double copy = 2 * shard / kTestBandwidth, sum = 3 * shard / kTestBandwidth;
  const double gathers = 4 * copy + linears.excess({0, 1, 2}, 2) + linears.excess({4, 5}, 2) +
                         linears.excess({3}, 2) + linears.excess({6}, 2);
  const double scatters = 2 * sum + linears.excess({3}, 2) + linears.excess({6}, 2);
  const double steps = kLayers * kMicroBatches;
  EXPECT_NEAR(hidden.gathers, exposed.gathers - steps * (layer.gathers - gathers), 1e-9 * exposed.gathers);
  EXPECT_NEAR(hidden.scatters, exposed.scatters - steps * (2 * layer.forward_scatter - scatters),
              1e-9 * exposed.scatters);
}

// Compute beside a transfer 18.9% slower (Lee et al.): each fused call adds that share of its one transfer.
TEST(PlannerTpOverlap, AsyncTpSlowsTheComputeBesideEachTransfer) {
  ClusterSpec cluster = testing::test_cluster(1, 2, 1000, 10, 1e6);
  const Priced unslowed = tensor_parallel_terms(cluster, parse_tp_overlap("async-tp", ""));
  cluster.device.comm_compute_slowdown = 0.189;
  const Priced slowed = tensor_parallel_terms(cluster, parse_tp_overlap("async-tp", ""));
  const Priced layer = layer_collectives(cluster);
  const double steps = kLayers * kMicroBatches;
  // Four fused gathers, two fused reduce-scatters per layer, each of one transfer (2 ranks) beside a chunk.
  EXPECT_NEAR(slowed.gathers - unslowed.gathers, steps * 0.189 * layer.gathers, 1e-9 * slowed.gathers);
  EXPECT_NEAR(slowed.scatters - unslowed.scatters, steps * 0.189 * 2 * layer.forward_scatter,
              1e-9 * slowed.scatters);
}

// Userbuffers with no SMs taken but the attention output projection's pipelined reduce-scatter's one (of the
// test device's 4): its 4 chunks run 4/3 as long, and each forward reduce-scatter leaves its last quarter; the
// gathers by ring exchange leave their chunks' excess; the backward reduce-scatters hide behind the whole
// weight-gradient GEMMs.
TEST(PlannerTpOverlap, UserbuffersLeavesThePipelinesLastChunkAndTheSmsTaken) {
  const ClusterSpec cluster = testing::test_cluster(1, 2, 1000, 10, 1e6);
  const std::string none = "qkv_fprop=0,fc1_fprop=0,proj_dgrad=0,fc2_dgrad=0,fc2_fprop=0,qkv_wgrad=0,fc1_wgrad=0";
  const Priced exposed = tensor_parallel_terms(cluster, {});
  const Priced overlapped = tensor_parallel_terms(cluster, parse_tp_overlap("userbuffers", none + ",proj_fprop=1"));
  const Priced layer = layer_collectives(cluster);
  const Linears linears = layer_linears(cluster);
  const double steps = kLayers * kMicroBatches;
  const double gathers = linears.excess({0, 1, 2}, 2) + linears.excess({4, 5}, 2) + linears.excess({3}, 2) +
                         linears.excess({6}, 2);
  EXPECT_NEAR(overlapped.gathers, exposed.gathers - steps * (layer.gathers - gathers), 1e-9 * exposed.gathers);
  const double left = linears.excess({3}, 4, 4.0 / 3) + linears.excess({6}, 4) + 2 * layer.forward_scatter / 4;
  EXPECT_NEAR(overlapped.scatters, exposed.scatters - steps * (layer.scatters - left), 1e-9 * exposed.scatters);
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
