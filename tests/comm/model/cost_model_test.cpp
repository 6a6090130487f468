// The cost model against the textbook costs (Thakur, Rabenseifner and Gropp
// 2005, as in MPICH's comments) and hand-derived two-level costs, and the
// choices it makes on described topologies.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/cost_model.h"
#include "core/error.h"

namespace strata::comm {
namespace {

constexpr double kAlpha = 2e-6, kBandwidth = 10e9, kReduce = 8e9;

TopologyDesc one_node(int ranks) {
  TopologyDesc topology;
  topology.nodes = 1;
  topology.ranks_per_node = ranks;
  topology.intra = {kAlpha, kBandwidth};
  topology.inter = topology.intra;
  topology.reduce_Bps = kReduce;
  return topology;
}

// 2 nodes x 8 ranks, the network link ten times slower than shared memory.
TopologyDesc two_nodes() {
  TopologyDesc topology;
  topology.nodes = 2;
  topology.ranks_per_node = 8;
  topology.intra = {1e-6, 20e9};
  topology.inter = {5e-6, 2e9};
  topology.reduce_Bps = kReduce;
  return topology;
}

double lg(double p) { return std::log2(p); }

void expect_near_relative(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-9 * want + 1e-15) << what;
}

TEST(CostModel, OneNodeMatchesTheTextbookForPowersOfTwo) {
  const double n = 1 << 20, a = kAlpha, b = 1.0 / kBandwidth, c = 1.0 / kReduce;
  for (int p : {2, 4, 8, 16}) {
    TopologyDesc topology = one_node(p);
    auto cost = [&](Collective op, Algorithm algorithm) { return predict_seconds({op, n}, algorithm, topology); };
    double f = (p - 1.0) / p;
    std::string at = " at p=" + std::to_string(p);
    expect_near_relative(cost(Collective::AllReduce, Algorithm::Ring), 2 * (p - 1) * a + 2 * f * n * b + f * n * c,
                         "ring all_reduce" + at);
    expect_near_relative(cost(Collective::AllReduce, Algorithm::RecursiveHalvingDoubling),
                         2 * lg(p) * a + 2 * f * n * b + f * n * c, "rhd all_reduce" + at);
    expect_near_relative(cost(Collective::AllReduce, Algorithm::RecursiveDoubling), lg(p) * (a + n * b + n * c),
                         "recursive doubling all_reduce" + at);
    expect_near_relative(cost(Collective::AllReduce, Algorithm::BinomialTree),
                         2 * lg(p) * (a + n * b) + lg(p) * n * c, "binomial all_reduce" + at);
    expect_near_relative(cost(Collective::ReduceScatter, Algorithm::Ring), (p - 1) * a + f * n * b + f * n * c,
                         "ring reduce_scatter" + at);
    expect_near_relative(cost(Collective::ReduceScatter, Algorithm::RecursiveHalvingDoubling),
                         lg(p) * a + f * n * b + f * n * c, "recursive halving reduce_scatter" + at);
    expect_near_relative(cost(Collective::AllGather, Algorithm::Ring), (p - 1) * a + f * n * b, "ring all_gather" + at);
    expect_near_relative(cost(Collective::AllGather, Algorithm::RecursiveDoubling), lg(p) * a + f * n * b,
                         "recursive doubling all_gather" + at);
    expect_near_relative(cost(Collective::Broadcast, Algorithm::BinomialTree), lg(p) * (a + n * b),
                         "binomial broadcast" + at);
  }
}

// Measured message times replace latency + bytes / bandwidth in the MPI-based algorithms' steps: exact at the
// points, linear between them, the bandwidth beyond the last, never below the straight line; a step up between
// 2 and 4 KiB (a library's eager limit) makes a 4 KiB recursive-doubling all-reduce dearer by exactly that step.
TEST(CostModel, MeasuredMessageTimesPriceTheStepsInsideANode) {
  TopologyDesc topology = one_node(2);
  const double c = 1.0 / kReduce;
  EXPECT_DOUBLE_EQ(topology.intra_message_s(4096), kAlpha + 4096 / kBandwidth);  // unknown: the straight line
  const double plain = predict_seconds({Collective::AllReduce, 4096}, Algorithm::RecursiveDoubling, topology);
  expect_near_relative(plain, kAlpha + 4096 / kBandwidth + 4096 * c, "recursive doubling without message times");
  topology.intra_message = {{4, kAlpha}, {2048, 2.5e-6}, {4096, 6e-6}, {16384, 8e-6}};
  EXPECT_DOUBLE_EQ(topology.intra_message_s(1), kAlpha + 1 / kBandwidth);  // the line: above the first point
  EXPECT_DOUBLE_EQ(topology.intra_message_s(4096), 6e-6);
  EXPECT_DOUBLE_EQ(topology.intra_message_s(3072), (2.5e-6 + 6e-6) / 2);
  EXPECT_DOUBLE_EQ(topology.intra_message_s(16384 + 1e6), 8e-6 + 1e6 / kBandwidth);
  expect_near_relative(predict_seconds({Collective::AllReduce, 4096}, Algorithm::RecursiveDoubling, topology),
                       6e-6 + 4096 * c, "recursive doubling with message times");
  expect_near_relative(predict_seconds({Collective::AllReduce, 2048}, Algorithm::RecursiveDoubling, topology),
                       2.5e-6 + 2048 * c, "recursive doubling below the step");
  // The latency stays the message's fixed part, which a calibration scales apart from the rest.
  const Cost cost = predict({Collective::AllReduce, 4096}, Algorithm::RecursiveDoubling, topology);
  EXPECT_DOUBLE_EQ(cost.latency_s, kAlpha);
  // Measured with one pair talking: where every rank exchanging at once is slower, the bandwidth's line holds.
  topology.intra.bandwidth_Bps = 0.1e9;
  EXPECT_DOUBLE_EQ(topology.intra_message_s(16384), kAlpha + 16384 / 0.1e9);
  EXPECT_DOUBLE_EQ(topology.intra_message_s(4), kAlpha + 4 / 0.1e9);
  topology.intra_message = {{4096, 6e-6}, {2048, 2.5e-6}};
  EXPECT_THROW(topology.validate("test"), Error);
}

TEST(CostModel, NonPowersOfTwoFoldTheExtraRanks) {
  const double n = 3e6, a = kAlpha, b = 1.0 / kBandwidth, c = 1.0 / kReduce;
  for (int p : {3, 5, 6, 7, 12}) {
    TopologyDesc topology = one_node(p);
    double q = std::exp2(std::floor(lg(p)));  // the power-of-two core
    double f = (q - 1) / q;
    std::string at = " at p=" + std::to_string(p);
    // MPICH / HCCL: (2 lg p' + 2) alpha + (2 (p'-1)/p' + 2) n beta + ((p'-1)/p' + 1) n gamma.
    expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::RecursiveHalvingDoubling, topology),
                         (2 * lg(q) + 2) * a + (2 * f + 2) * n * b + (f + 1) * n * c, "rhd all_reduce" + at);
    expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::RecursiveDoubling, topology),
                         (lg(q) + 2) * a + (lg(q) + 2) * n * b + (lg(q) + 1) * n * c, "recursive doubling" + at);
    double depth = std::ceil(lg(p));
    expect_near_relative(predict_seconds({Collective::Broadcast, n}, Algorithm::BinomialTree, topology),
                         depth * (a + n * b), "binomial broadcast" + at);
    // The ring does not care about powers of two.
    expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::Ring, topology),
                         2 * (p - 1) * a + 2.0 * (p - 1) / p * n * b + (p - 1.0) / p * n * c, "ring" + at);
  }
}

TEST(CostModel, PipelinedRingBroadcastIsAChainOfChunks) {
  const double n = 10e6;
  ModelOptions options;
  options.chunk_bytes = 1 << 20;
  TopologyDesc topology = one_node(6);
  double chunks = std::ceil(n / options.chunk_bytes);
  expect_near_relative(predict_seconds({Collective::Broadcast, n}, Algorithm::Ring, topology, options),
                       (6 - 2 + chunks) * (kAlpha + n / chunks / kBandwidth), "chain broadcast");
}

TEST(CostModel, Bf16ReducesInFp32AndGathersInBf16) {
  const double bytes = 1 << 20;  // of bf16: count = bytes / 2
  TopologyDesc topology = one_node(4);
  double count = bytes / 2, f = 3.0 / 4.0;
  double want = 6 * kAlpha + f * count * 4 / kBandwidth + f * count * 4 / kReduce + f * count * 2 / kBandwidth;
  expect_near_relative(predict_seconds({Collective::AllReduce, bytes, DType::BF16}, Algorithm::Ring, topology), want,
                       "bf16 ring all_reduce");
}

TEST(CostModel, FlowsAcrossNodesShareTheNodeLink) {
  TopologyDesc topology = two_nodes();
  const double n = 64e6, ai = 1e-6, ae = 5e-6, bi = 1 / 20e9, be = 1 / 2e9, c = 1 / kReduce;
  // Ring: every step has one flow leaving each node; the inter-node hop sets the pace.
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::Ring, topology),
                       30 * (ae + n / 16 * be) + 15 * n / 16 * c, "ring across two nodes");
  // Recursive halving starts at distance 8: all 8 ranks of a node send half the buffer over one link.
  double reduce_scatter = (ae + 8 * (n / 2) * be) + 3 * ai + (n / 4 + n / 8 + n / 16) * bi;
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::RecursiveHalvingDoubling, topology),
                       2 * reduce_scatter + (n / 2 + n / 4 + n / 8 + n / 16) * c, "rhd across two nodes");
  // Hierarchical: ring inside each node, then each of the 8 columns shares the link (bandwidth / 8).
  double inside = 14 * ai + 2 * 7 * (n / 8) * bi + 7 * (n / 8) * c;
  double part = n / 8, column_beta = 8 * be;
  double ring = 2 * (ae + part / 2 * column_beta) + part / 2 * c;
  double doubling = ae + part * column_beta + part * c;
  double binomial = 2 * (ae + part * column_beta) + part * c;
  double across = std::min({ring, doubling, binomial});
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::Hierarchical, topology), inside + across,
                       "hierarchical");
}

TEST(CostModel, SmallMessagesPickLatencyOptimalAlgorithms) {
  for (const TopologyDesc& topology : {one_node(8), two_nodes()}) {
    EXPECT_EQ(choose_algorithm({Collective::AllReduce, 64}, topology).algorithm, Algorithm::RecursiveDoubling);
    EXPECT_EQ(choose_algorithm({Collective::Broadcast, 64}, topology).algorithm, Algorithm::BinomialTree);
    EXPECT_EQ(choose_algorithm({Collective::AllGather, 64}, topology).algorithm, Algorithm::RecursiveDoubling);
    EXPECT_EQ(choose_algorithm({Collective::ReduceScatter, 64}, topology).algorithm,
              Algorithm::RecursiveHalvingDoubling);
  }
}

TEST(CostModel, LargeMessagesPickBandwidthOptimalAlgorithmsOnOneNode) {
  TopologyDesc topology = one_node(8);
  const double n = 256e6;
  Choice all_reduce = choose_algorithm({Collective::AllReduce, n}, topology);
  EXPECT_TRUE(all_reduce.algorithm == Algorithm::RecursiveHalvingDoubling || all_reduce.algorithm == Algorithm::Ring);
  // The bandwidth terms are the optimum 2 (p-1)/p n beta + (p-1)/p n gamma.
  Cost cost = predict({Collective::AllReduce, n}, all_reduce.algorithm, topology);
  expect_near_relative(cost.transfer_s, 2 * 7.0 / 8 * n / kBandwidth + 7.0 / 8 * n / kReduce, "optimal transfer");
  EXPECT_EQ(choose_algorithm({Collective::Broadcast, n}, topology).algorithm, Algorithm::Ring);
  Choice gather = choose_algorithm({Collective::AllGather, n}, topology);
  expect_near_relative(predict({Collective::AllGather, n}, gather.algorithm, topology).transfer_s,
                       7.0 / 8 * n / kBandwidth, "optimal all_gather transfer");
}

TEST(CostModel, HierarchicalWinsWhenTheNetworkIsTheBottleneck) {
  TopologyDesc topology = two_nodes();
  for (double n : {16e6, 256e6, 1e9}) {
    Choice choice = choose_algorithm({Collective::AllReduce, n}, topology);
    EXPECT_EQ(choice.algorithm, Algorithm::Hierarchical) << n << " bytes";
  }
  // With a network as fast as shared memory the flat algorithms are as good or better.
  TopologyDesc flat = two_nodes();
  flat.inter = flat.intra;
  EXPECT_NE(choose_algorithm({Collective::AllReduce, 256e6}, flat).algorithm, Algorithm::Hierarchical);
}

TEST(CostModel, ExplicitPlacementChangesTheCost) {
  // The same 2 x 2 ranks, placed round-robin instead of node by node: a ring crosses nodes at every hop.
  TopologyDesc blocked = two_nodes();
  blocked.ranks_per_node = 2;
  TopologyDesc interleaved = blocked;
  interleaved.node_of_rank = {0, 1, 0, 1};
  double n = 1e6;
  double blocked_s = predict_seconds({Collective::AllReduce, n}, Algorithm::Ring, blocked);
  double interleaved_s = predict_seconds({Collective::AllReduce, n}, Algorithm::Ring, interleaved);
  // Blocked: one flow per node crosses; interleaved: two share the link.
  expect_near_relative(blocked_s, 6 * (5e-6 + n / 4 / 2e9) + 3 * n / 4 / kReduce, "blocked ring");
  expect_near_relative(interleaved_s, 6 * (5e-6 + 2 * n / 4 / 2e9) + 3 * n / 4 / kReduce, "interleaved ring");
}

TEST(CostModel, CalibrationScalesEachTerm) {
  TopologyDesc topology = one_node(4);
  ModelOptions options;
  options.of(Algorithm::Ring) = {3.0, 0.5};
  Cost raw = predict({Collective::AllReduce, 1e6}, Algorithm::Ring, topology);
  Cost scaled = predict({Collective::AllReduce, 1e6}, Algorithm::Ring, topology, options);
  expect_near_relative(scaled.latency_s, 3.0 * raw.latency_s, "latency");
  expect_near_relative(scaled.transfer_s, 0.5 * raw.transfer_s, "transfer");
  options.of(Algorithm::Ring).size_factors = {{1e5, 2.0}, {1e7, 4.0}};
  Cost corrected = predict({Collective::AllReduce, 1e6}, Algorithm::Ring, topology, options);
  expect_near_relative(corrected.total(), 3.0 * scaled.total(), "size factor 3 halfway (in log) between 1e5 and 1e7");
}

TEST(CostModel, RefusesWhatItCannotPrice) {
  TopologyDesc topology = one_node(4);
  EXPECT_THROW(predict({Collective::AllReduce, 1e6}, Algorithm::Mpi, topology), Error);
  EXPECT_THROW(predict({Collective::AllReduce, 1e6}, Algorithm::Auto, topology), Error);
  EXPECT_THROW(predict({Collective::ReduceScatter, 1e6}, Algorithm::BinomialTree, topology), Error);
  std::string why;
  EXPECT_FALSE(applicable(Algorithm::Hierarchical, {Collective::AllReduce, 1e6}, topology, &why));
  EXPECT_NE(why.find("2 nodes"), std::string::npos) << why;
  TopologyDesc uneven = two_nodes();
  uneven.node_of_rank = {0, 0, 0, 1};
  EXPECT_FALSE(applicable(Algorithm::Hierarchical, {Collective::AllReduce, 1e6}, uneven, &why));
  EXPECT_NE(why.find("same number"), std::string::npos) << why;
}

// No exchange area: the direct algorithms read every peer's data by cross-memory attach.
ModelOptions unstaged() {
  ModelOptions options;
  options.staging_bytes = 0;
  return options;
}

// direct_split: each rank reads its slice of the p - 1 other inputs, sums p
// slices, then reads the p - 1 other reduced slices; three meetings.
TEST(CostModel, DirectSplitReadsTwoSlicesPerPeerAndSumsItsOwn) {
  TopologyDesc topology = one_node(4);
  const double n = 4 << 20, a = kAlpha, b = 1.0 / kBandwidth, c = 1.0 / kReduce;
  std::string why;
  topology.shared_memory = true;
  EXPECT_FALSE(applicable(Algorithm::DirectSplit, {Collective::AllReduce, n}, topology, &why));
  EXPECT_NE(why.find("cross-memory attach"), std::string::npos) << why;
  topology.cross_memory = true;
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::DirectSplit, topology, unstaged()),
                       3 * a + 0.75 * (2 * n * b + n * c), "direct_split");
  expect_near_relative(
      predict_seconds({Collective::AllReduce, n, DType::BF16}, Algorithm::DirectSplit, topology, unstaged()),
      3 * a + 0.75 * (2 * n * b + 2 * n * c), "direct_split bf16 (reads bf16, sums fp32)");
  // Staged: the input and a slice copied in, the reads copies at the rank's memory speed.
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::DirectSplit, topology),
                       3 * a + 1.25 * n * c + 0.75 * (2 * n * c + n * c), "direct_split staged");
  // Fewer bytes than direct's p - 1 whole inputs once the transfer dominates.
  EXPECT_LT(predict_seconds({Collective::AllReduce, n}, Algorithm::DirectSplit, topology, unstaged()),
            predict_seconds({Collective::AllReduce, n}, Algorithm::DirectRead, topology, unstaged()));
  EXPECT_LT(predict_seconds({Collective::AllReduce, n}, Algorithm::DirectSplit, topology),
            predict_seconds({Collective::AllReduce, n}, Algorithm::DirectRead, topology));
  EXPECT_FALSE(applicable(Algorithm::DirectSplit, {Collective::ReduceScatter, n}, topology));
}

// Unstaged, with the probe's cross-memory read rates known, the reads run at them: the inputs' slices a
// chunk at a time, the reduced slices (n / p bytes each) whole; direct reads whole inputs a chunk at a time.
TEST(CostModel, UnstagedDirectReadsRunAtTheCrossMemoryRateOfTheirSize) {
  TopologyDesc topology = one_node(4);
  topology.shared_memory = topology.cross_memory = true;
  topology.cross_read.points = {{256 << 10, 6e9}, {1 << 20, 4e9}, {8 << 20, 3e9}};
  ModelOptions options = unstaged();
  options.chunk_bytes = 256 << 10;
  const double n = 4 << 20, a = kAlpha, c = 1.0 / kReduce;
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::DirectSplit, topology, options),
                       3 * a + 0.75 * (n / 6e9 + n / 4e9 + n * c), "direct_split: chunks at 6e9, slices at 4e9");
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::DirectRead, topology, options),
                       2 * a + 3 * (n / 6e9 + n * c), "direct: chunks at 6e9");
}

TEST(CostModel, SharedMemoryAlgorithmsNeedAHostThatAllowsThem) {
  TopologyDesc topology = one_node(4);
  const double n = 48 * 1024, a = kAlpha, b = 1.0 / kBandwidth, c = 1.0 / kReduce;
  std::string why;
  EXPECT_FALSE(applicable(Algorithm::SharedMemory, {Collective::AllReduce, n}, topology, &why));
  EXPECT_NE(why.find("share memory"), std::string::npos) << why;
  topology.shared_memory = true;
  EXPECT_FALSE(applicable(Algorithm::DirectRead, {Collective::AllReduce, n}, topology, &why));
  EXPECT_NE(why.find("cross-memory attach"), std::string::npos) << why;
  topology.cross_memory = true;
  // shm: one copy in and p - 1 sums, fp32; direct: p - 1 reads in the dtype and p - 1 sums
  // (staged: its input copied in first, and the reads copies at the rank's memory speed).
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::SharedMemory, topology),
                       2 * a + 4 * n * c, "shm");
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::DirectRead, topology, unstaged()),
                       2 * a + 3 * (n * b + n * c), "direct");
  expect_near_relative(
      predict_seconds({Collective::AllReduce, n, DType::BF16}, Algorithm::DirectRead, topology, unstaged()),
      2 * a + 3 * (n * b + 2 * n * c), "direct bf16 (reads bf16, sums fp32)");
  expect_near_relative(predict_seconds({Collective::AllReduce, n}, Algorithm::DirectRead, topology),
                       2 * a + n * c + 3 * (n * c + n * c), "direct staged");
  EXPECT_FALSE(applicable(Algorithm::SharedMemory, {Collective::Broadcast, n}, topology));
  // shm takes what fits its slots (as fp32): 64 KiB of f32, 32 KiB of bf16.
  EXPECT_TRUE(applicable(Algorithm::SharedMemory, {Collective::AllReduce, 64 << 10}, topology));
  EXPECT_TRUE(applicable(Algorithm::SharedMemory, {Collective::AllReduce, 32 << 10, DType::BF16}, topology));
  EXPECT_FALSE(applicable(Algorithm::SharedMemory, {Collective::AllReduce, 64 << 10, DType::BF16}, topology, &why));
  EXPECT_NE(why.find("its slots"), std::string::npos) << why;
  TopologyDesc two = two_nodes();
  two.shared_memory = two.cross_memory = true;
  EXPECT_FALSE(applicable(Algorithm::DirectRead, {Collective::AllReduce, n}, two, &why));
  EXPECT_NE(why.find("one node"), std::string::npos) << why;
}

TEST(CostModel, SingleRankCostsNothing) {
  TopologyDesc topology = one_node(1);
  for (Collective op : kCollectives) EXPECT_EQ(choose_algorithm({op, 1e6}, topology).predicted_s, 0.0);
}

TEST(CostModel, ValidationNamesTheProblem) {
  TopologyDesc topology = one_node(4);
  topology.intra.bandwidth_Bps = 0.0;
  try {
    topology.validate("my cluster");
    FAIL() << "accepted a zero bandwidth";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("my cluster: intra.bandwidth"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace strata::comm

namespace strata::comm {
namespace {

// A device library (NCCL, HCCL) sends the data's dtype and combines as it copies: a bf16 ring
// reduce-scatter costs what a bf16 ring all-gather of the same buffer costs, and an all-reduce the
// two of them; Strata's own engine sends fp32 partial sums and combines in a pass of its own.
TEST(CostModel, FusedReductionsSendTheDataDtypeAndCostTheirTransfersAlone) {
  const double bytes = 1 << 24;
  TopologyDesc topology;
  topology.nodes = 1;
  topology.ranks_per_node = 8;
  topology.intra = {2e-6, 10e9};
  topology.inter = topology.intra;
  topology.reduce_Bps = 8e9;
  ModelOptions device_library;
  device_library.fused_reduction = true;
  auto cost = [&](Collective op, const ModelOptions& options) {
    return predict_seconds({op, bytes, DType::BF16}, Algorithm::Ring, topology, options);
  };
  const double gather = cost(Collective::AllGather, device_library);
  EXPECT_NEAR(cost(Collective::ReduceScatter, device_library), gather, 1e-12);
  EXPECT_NEAR(cost(Collective::AllReduce, device_library), 2 * gather, 1e-12);
  // Strata's engine: twice the bytes on the wire (fp32 sums of bf16 data) plus the combining pass.
  const double p = 8, f = (p - 1) / p;
  EXPECT_NEAR(cost(Collective::ReduceScatter, ModelOptions{}), (p - 1) * 2e-6 + f * bytes * 2 / 10e9 + f * bytes * 2 / 8e9,
              1e-12);
}

}  // namespace
}  // namespace strata::comm
