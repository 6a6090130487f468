// The all-to-all costs against hand-derived formulas: pairwise by messages
// (Thakur, Rabenseifner and Gropp's (p-1)(alpha + n/p beta)), pairwise by
// direct reads, the two-level exchange, and uneven counts (flat and two-level).
#include <gtest/gtest.h>

#include <limits>

#include "comm/cost_model.h"
#include "core/error.h"

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

// A host whose cross-memory reads run at 3e9 B/s against copies at 8e9 (the
// reduce rate): two copies (0.25 ns a byte) beat one read (0.33 ns), so the
// senders stage their blocks, as on the AMD EPYC VM where process_vm_readv
// moved 4.7 GB/s and memcpy 13.5.
TopologyDesc slow_reads(int ranks) {
  TopologyDesc topology = node_of(ranks, true);
  topology.cross_read.points = {{4096.0, 3e9}};
  return topology;
}

// A 1 MiB exchange area (CommConfig::exchange_staging_bytes), which the 4e6 and 3e6 byte blocks below overflow.
ModelOptions one_mib_area() {
  ModelOptions options;
  options.staging_bytes = 1 << 20;
  return options;
}

TEST(AllToAllCost, PairwiseMessagesOnOneNodeIsTheTextbookCost) {
  const double n = 8e6;
  for (int p : {2, 3, 4, 8}) {
    double want = (p - 1) * (2e-6 + n / p / 10e9);
    EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, node_of(p, false)), want, 1e-12 * want)
        << p;
  }
}

// Blocks past the sender's exchange area are read from its input: one copy,
// and a second meeting (the sender waits for its readers); a rank's own block
// is a copy from its input to its output at its memory speed (8e9).
TEST(AllToAllCost, DirectReadsMeetTwiceAndReadTheirShare) {
  const int p = 4;
  const double n = 2.0 * p * static_cast<double>(kDefaultStagingBytes);  // each block twice the area
  double want = 2 * 2e-6 + (p - 1) * n / p / 10e9 + n / p / 8e9;
  EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, node_of(p, true)), want, 1e-12 * want);
  // With a smaller area (CommConfig::exchange_staging_bytes) the same holds for smaller exchanges.
  const double small = 8e6;
  double want_small = 2 * 2e-6 + (p - 1) * small / p / 10e9 + small / p / 8e9;
  EXPECT_NEAR(predict({Collective::AllToAll, small}, Algorithm::Pairwise, node_of(p, true), one_mib_area()).total(),
              want_small, 1e-12 * want_small);
}

// With a local copy rate measured (the probe's local_copy curve), a rank's own
// block is copied at that rate, taken at the size of the rank's input (the
// curve's block b touches 2 b a rank, as the input and output do): 2 ranks of
// 2e6 bytes, the peer's 1e6 read at 10e9 and the own 1e6 copied at 25e9, the
// rate at 2e6 between the curve's 1e6 (40e9) and 4e6 (10e9) points, linear in
// log(bytes). Staged blocks still cross at the copy rate (8e9 here).
TEST(AllToAllCost, TheOwnBlockCopiesAtTheLocalRateOfTheRanksInput) {
  TopologyDesc topology = node_of(2, true);
  topology.local_copy.points = {{1e6, 40e9}, {4e6, 10e9}};
  const double n = 2e6;
  double want = 2 * 2e-6 + 1e6 / 10e9 + 1e6 / 25e9;
  EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, topology), want, 1e-12 * want);
  TopologyDesc slow = slow_reads(2);
  slow.local_copy.points = {{1e3, 40e9}};
  const double small = 64e3;  // staged: the peer's 32e3 in and out at 8e9, the own 32e3 at 40e9
  double want_small = 2 * 2e-6 + 2 * 32e3 / 8e9 + 32e3 / 40e9;
  EXPECT_NEAR(predict_seconds({Collective::AllToAll, small}, Algorithm::Pairwise, slow), want_small,
              1e-12 * want_small);
}

// Where reads are slow, blocks that fit the sender's exchange area are
// staged: a copy in, a copy out, both at the rank's memory speed (reduce_Bps,
// 8e9 here), as is the copy of its own block, and two meetings: the call's,
// and at the next call the wait until the peers have taken the blocks out of
// the area.
TEST(AllToAllCost, SmallExchangesStageTheirBlocksAndMeetTwice) {
  const int p = 4;
  const double n = 64e3;
  double want = 2 * 2e-6 + (2 * (p - 1) + 1) * n / p / 8e9;
  EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, slow_reads(p)), want, 1e-12 * want);
  // Rank 0 sends 0.6 of an area to each peer: the first fits its area, the
  // others stay in its input. Rank 2 (as rank 3)
  // copies 3e3 in, reads its big block at 3e9 and copies 2e3 out (rank 1
  // copies its big block out of rank 0's area at 8e9: less).
  const double big = 0.6 * static_cast<double>(kDefaultStagingBytes);
  std::vector<std::vector<double>> bytes(p, std::vector<double>(p, 1e3));
  for (int to = 1; to < p; ++to) bytes[0][static_cast<size_t>(to)] = big;
  for (int rank = 0; rank < p; ++rank) bytes[static_cast<size_t>(rank)][static_cast<size_t>(rank)] = 0;
  double want_mixed = 2 * 2e-6 + (3e3 + 2e3) / 8e9 + big / 3e9;
  EXPECT_NEAR(predict_all_to_all_v(bytes, slow_reads(p)).total(), want_mixed, 1e-12 * want_mixed);
}

// A rank whose outgoing blocks exceed the staging limit stages none of them,
// though they fit its area and staging would pay: its peers read them (3e9
// here) and it waits for them. At the limit they are staged (two meetings either way).
TEST(AllToAllCost, ExchangesPastTheStagingLimitReadEveryBlock) {
  const int p = 4;
  ModelOptions options;
  options.all_to_all_staging_limit = 3 << 20;  // outgoing bytes of a 4 MiB exchange
  const double at_limit = 4 << 20;
  double staged = 2 * 2e-6 + (2 * (p - 1) + 1) * at_limit / p / 8e9;
  EXPECT_NEAR(predict({Collective::AllToAll, at_limit}, Algorithm::Pairwise, slow_reads(p), options).total(), staged,
              1e-12 * staged);
  const double past = 8 << 20;
  double read = 2 * 2e-6 + (p - 1) * past / p / 3e9 + past / p / 8e9;
  EXPECT_NEAR(predict({Collective::AllToAll, past}, Algorithm::Pairwise, slow_reads(p), options).total(), read,
              1e-12 * read);
  // Uneven: rank 0 sends 2 MiB to each peer (6 MiB, past the limit), the others 1e3: rank 1 reads 2 MiB and
  // copies 1e3 out of rank 2's and 3's areas, after staging its own 3e3.
  std::vector<std::vector<double>> bytes(p, std::vector<double>(p, 1e3));
  for (int to = 1; to < p; ++to) bytes[0][static_cast<size_t>(to)] = 2 << 20;
  for (int rank = 0; rank < p; ++rank) bytes[static_cast<size_t>(rank)][static_cast<size_t>(rank)] = 0;
  double uneven = 2 * 2e-6 + (2 << 20) / 3e9 + (3e3 + 2e3) / 8e9;
  EXPECT_NEAR(predict_all_to_all_v(bytes, slow_reads(p), options).total(), uneven, 1e-12 * uneven);
}

// More ranks than cores: the copies and meetings of all ranks share the cores,
// so a skewed exchange costs its total work over the cores, as an even one of
// the same total does, rather than its busiest rank's work.
TEST(AllToAllCost, RanksSharingCoresPayTheTotalWorkOverTheCores) {
  const int p = 4;
  TopologyDesc shared = node_of(p, true);
  shared.cores_per_node = 2;
  const double block = 4e6;  // past a 1 MiB exchange area: one copy per block, two meetings
  std::vector<std::vector<double>> skewed(p, std::vector<double>(p, 0.0));
  for (int from = 1; from < p; ++from) skewed[static_cast<size_t>(from)][0] = 3 * block;  // all to rank 0
  for (int from = 0; from < p; ++from) {
    for (int to = 1; to < p; ++to) skewed[static_cast<size_t>(from)][static_cast<size_t>(to)] = from == to ? 0.0 : block / 3;
  }
  double total = 0.0, busiest = 0.0;
  for (int to = 0; to < p; ++to) {
    double received = 0.0;
    for (int from = 0; from < p; ++from) received += from == to ? 0.0 : skewed[static_cast<size_t>(from)][static_cast<size_t>(to)];
    total += received;
    busiest = std::max(busiest, received);
  }
  // The two meetings are each rank's work too: 4 ranks' worth on 2 cores.
  double want = 2 * 2e-6 * p / 2 + std::max(busiest, total / 2) / 10e9;
  EXPECT_NEAR(predict_all_to_all_v(skewed, shared, one_mib_area()).total(), want, 1e-12 * want);
  // With a core per rank the busiest rank sets the pace.
  double own_cores = 2 * 2e-6 + busiest / 10e9;
  EXPECT_NEAR(predict_all_to_all_v(skewed, node_of(p, true), one_mib_area()).total(), own_cores, 1e-12 * own_cores);
  shared.cores_per_node = -1;
  EXPECT_THROW(shared.validate("test cluster"), Error);
}

// Past the node's cache the copies share its memory bandwidth. 4 ranks on 2
// cores, 6e9 B/s of memory, an 8e6-byte cache, reads at 3e9. Staged, an
// 8e6-byte exchange would touch 88e6 bytes (each rank its own block twice,
// 3 blocks three times: input, area, output), 1/11 of them in cache, and its
// two copies would cost 2 (1/11 / 8e9 + 10/11 / 3e9) s a byte, the memory's
// 3e9 B/s per core, more than one read at 3e9: so its 2e6-byte blocks are read.
// Then the node touches 64e6 bytes, 1/8 in cache: each rank copies its own
// block (1/8 at 8e9, the rest at 3e9) and reads 3 (at 3e9 either way); the 4
// ranks' work runs on 2 cores, and the two meetings are 4 ranks' work on 2 cores too.
TEST(AllToAllCost, CopiesPastTheCacheShareTheMemoryBandwidth) {
  const int p = 4;
  TopologyDesc host = slow_reads(p);
  host.cores_per_node = 2;
  host.memory_Bps = 6e9;
  host.cache_bytes = 8e6;
  const double n = 8e6;
  const double meeting = 2e-6 * p / 2;
  double want = 2 * meeting + 2 * (2e6 * ((1.0 / 8.0) / 8e9 + (7.0 / 8.0) / 3e9) + 6e6 / 3e9);
  EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, host), want, 1e-12 * want);
  // In cache (a 64e3-byte exchange touches 176e3 bytes staged) the copies run
  // at the core's speed, and staging pays: 7 copies of 16e3 per rank, two meetings.
  double small = 2 * meeting + 2 * 7 * 16e3 / 8e9;
  EXPECT_NEAR(predict_seconds({Collective::AllToAll, 64e3}, Algorithm::Pairwise, host), small, 1e-12 * small);
  // Unknown memory bandwidth, or one faster than the cores copy: no memory
  // term, and the big exchange is staged (two copies at 8e9 beat a read at 3e9).
  double unbound = 2 * meeting + 28e6 / 8e9;
  for (double memory : {0.0, 100e9}) {
    host.memory_Bps = memory;
    EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, host), unbound, 1e-12 * unbound) << memory;
  }
  host.memory_Bps = -1;
  EXPECT_THROW(host.validate("test cluster"), Error);
}

// Two nodes of `per_node` ranks; ranks in node order (node n, position l is rank n * per_node + l).
TopologyDesc two_nodes(int per_node) {
  TopologyDesc topology;
  topology.nodes = 2;
  topology.ranks_per_node = per_node;
  topology.intra = {1e-6, 20e9};
  topology.inter = {20e-6, 2e9};
  topology.reduce_Bps = 8e9;
  return topology;
}

TEST(AllToAllCost, HierarchicalSendsFewerMessagesBetweenNodes) {
  const TopologyDesc topology = two_nodes(8);
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
  // On one host: every block is read (one read at 10e9 beats two copies at
  // 8e9; the 3e6 blocks do not fit an exchange area anyway), so the ranks
  // meet twice and rank 0, the busiest, reads 6e6.
  TopologyDesc direct = node_of(3, true);
  double want_direct = 2 * 2e-6 + 6e6 / 10e9;
  EXPECT_NEAR(predict_all_to_all_v(bytes, direct, one_mib_area()).total(), want_direct, 1e-12 * want_direct);
  // Uniform counts cost what all_to_all of that size costs.
  std::vector<std::vector<double>> even(3, std::vector<double>(3, 1e6));
  EXPECT_NEAR(predict_all_to_all_v(even, topology).total(),
              predict_seconds({Collective::AllToAllV, 3e6}, Algorithm::Pairwise, topology), 1e-15);
}

TEST(AllToAllCost, HierarchicalUnevenCountsPayTheirSlowestNodeAndColumn) {
  // Ranks (node, position): 0 = (0,0), 1 = (0,1), 2 = (1,0), 3 = (1,1).
  const TopologyDesc topology = two_nodes(2);
  // Rank 0 sends 4e6 to rank 3 (node 1, position 1); every other block is 1e3.
  std::vector<std::vector<double>> bytes(4, std::vector<double>(4, 1e3));
  for (int rank = 0; rank < 4; ++rank) bytes[static_cast<size_t>(rank)][static_cast<size_t>(rank)] = 0;
  bytes[0][3] = 4e6;
  // Sizes traded inside a node: 1 step of 2 x 8 bytes. Inside node 0, rank 0 hands rank 1 what goes to position 1
  // on both nodes: 1e3 (to rank 1) + 4e6 (to rank 3); one step as long as that block. Along column 1, rank 1
  // sends node 1 what both of node 0's ranks send rank 3: 4e6 + 1e3, on a link shared by the node's 2 columns.
  // Copies: the busiest rank, rank 0, sends 4e6 + 2e3.
  const double sizes = 1e-6 + 16 / 20e9;
  const double inside = 1e-6 + (4e6 + 1e3) / 20e9;
  const double across = 20e-6 + (4e6 + 1e3) / (2e9 / 2);
  const double want = sizes + inside + across + 3 * (4e6 + 2e3) / 8e9;
  EXPECT_NEAR(predict_all_to_all_v(bytes, topology, {}, Algorithm::Hierarchical).total(), want, 1e-12 * want);
  // Even counts cost what the two-level all_to_all_v of that size costs.
  std::vector<std::vector<double>> even(4, std::vector<double>(4, 1e6));
  EXPECT_NEAR(predict_all_to_all_v(even, topology, {}, Algorithm::Hierarchical).total(),
              predict_seconds({Collective::AllToAllV, 4e6}, Algorithm::Hierarchical, topology), 1e-15);
  // One node has nothing to price it on.
  EXPECT_THROW(predict_all_to_all_v(bytes, node_of(4, false), {}, Algorithm::Hierarchical), Error);
}

}  // namespace
}  // namespace strata::comm
