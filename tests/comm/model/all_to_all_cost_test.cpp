// The all-to-all costs against hand-derived formulas: pairwise by messages
// (Thakur, Rabenseifner and Gropp's (p-1)(alpha + n/p beta)), pairwise by
// direct reads, the two-level exchange, and uneven counts.
#include <gtest/gtest.h>

#include "comm/cost_model.h"

namespace strata::comm {
namespace {

TopologyDesc node_of(int ranks, bool cross_memory) {
  TopologyDesc topology;
  topology.ranks_per_node = ranks;
  topology.intra = {2e-6, 10e9};
  topology.reduce_Bps = 8e9;
  topology.shared_memory = topology.cross_memory = cross_memory;
  return topology;
}

TEST(AllToAllCost, PairwiseMessagesOnOneNodeIsTheTextbookCost) {
  const double n = 8e6;
  for (int p : {2, 3, 4, 8}) {
    double want = (p - 1) * (2e-6 + n / p / 10e9);
    EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, node_of(p, false)), want, 1e-12 * want)
        << p;
  }
}

TEST(AllToAllCost, DirectReadsMeetTwiceAndReadTheirShare) {
  const double n = 8e6;
  const int p = 4;
  double want = 2 * 2e-6 + (p - 1) * n / p / 10e9;
  EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, node_of(p, true)), want, 1e-12 * want);
}

TEST(AllToAllCost, HierarchicalSendsFewerMessagesBetweenNodes) {
  TopologyDesc topology;
  topology.nodes = 2;
  topology.ranks_per_node = 8;
  topology.intra = {1e-6, 20e9};
  topology.inter = {20e-6, 2e9};
  topology.reduce_Bps = 8e9;
  const double small = 4096;
  // Flat: all 15 steps have flows between the nodes, so each pays the network latency.
  double flat = predict_seconds({Collective::AllToAll, small}, Algorithm::Pairwise, topology);
  double two_level = predict_seconds({Collective::AllToAll, small}, Algorithm::Hierarchical, topology);
  // Inside: 7 (alpha_intra + n/8/bw); across: 1 step of n/2 on a link shared by 8 columns; 3 copies.
  double want = 7 * (1e-6 + small / 8 / 20e9) + (20e-6 + small / 2 * 1 / (2e9 / 8)) + 3 * small / 8e9;
  EXPECT_NEAR(two_level, want, 1e-12 * want);
  EXPECT_LT(two_level, flat);
  EXPECT_EQ(choose_algorithm({Collective::AllToAll, small}, topology).algorithm, Algorithm::Hierarchical);
}

TEST(AllToAllCost, UnevenCountsCostTheirBusiestStep) {
  TopologyDesc topology = node_of(3, false);
  // Rank 0 receives 3e6 from each peer; everything else is 1e3.
  std::vector<std::vector<double>> bytes = {{0, 1e3, 1e3}, {3e6, 0, 1e3}, {3e6, 1e3, 0}};
  // Step 1 (r -> r+1): largest block 3e6 (2 -> 0); step 2 (r -> r+2): 3e6 (1 -> 0).
  double want = 2 * (2e-6 + 3e6 / 10e9);
  EXPECT_NEAR(predict_all_to_all_v(bytes, topology).total(), want, 1e-12 * want);
  // Direct reads: rank 0 reads 6e6 itself.
  TopologyDesc direct = node_of(3, true);
  double want_direct = 2 * 2e-6 + 6e6 / 10e9;
  EXPECT_NEAR(predict_all_to_all_v(bytes, direct).total(), want_direct, 1e-12 * want_direct);
  // Uniform counts cost what all_to_all of that size costs.
  std::vector<std::vector<double>> even(3, std::vector<double>(3, 1e6));
  EXPECT_NEAR(predict_all_to_all_v(even, topology).total(),
              predict_seconds({Collective::AllToAllV, 3e6}, Algorithm::Pairwise, topology), 1e-15);
}

}  // namespace
}  // namespace strata::comm
