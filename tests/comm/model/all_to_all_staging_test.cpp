// Whether the one-host all-to-all stages its blocks (two copies through the
// exchange area) or has them read (one cross-memory read), decided from the
// copy and read rates: against the inequality 2 b / copy(b) <= b / read(b),
// worked by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/cost_model.h"
#include "core/error.h"

namespace strata::comm {
namespace {

constexpr double kKiB = 1024.0, kMiB = 1024.0 * 1024.0;

// Two ranks with a core each, a 1 us meeting, no cache or memory limits.
TopologyDesc host(RateCurve copy, RateCurve read) {
  TopologyDesc topology;
  topology.ranks_per_node = 2;
  topology.intra = {1e-6, 5e9};
  topology.reduce_Bps = 5e9;
  topology.shared_memory = topology.cross_memory = true;
  topology.copy = std::move(copy);
  topology.cross_read = std::move(read);
  return topology;
}

// The rates probed on the Xeon VM here (memcpy and process_vm_readv, GB/s):
// 31 and 13 at 256 KiB, 12.5 and 10.5 at 8 MiB.
TopologyDesc xeon() {
  return host({{{256 * kKiB, 31e9}, {8 * kMiB, 12.5e9}}}, {{{256 * kKiB, 13e9}, {8 * kMiB, 10.5e9}}});
}

// The AMD EPYC VM's: memcpy 13.5, process_vm_readv 4.7 GB/s (one size).
TopologyDesc epyc() { return host({{{8 * kMiB, 13.5e9}}}, {{{8 * kMiB, 4.7e9}}}); }

// Rank 0's row of a uniform exchange of blocks of `block` bytes.
std::vector<double> row(double block) { return {block, block}; }

TEST(AllToAllStaging, RateCurvesInterpolateInLogBytesAndHoldTheirEnds) {
  RateCurve curve{{{256 * kKiB, 31e9}, {8 * kMiB, 12.5e9}}};
  EXPECT_EQ(curve.at(4 * kKiB), 31e9);
  EXPECT_EQ(curve.at(64 * kMiB), 12.5e9);
  // 256 KiB * sqrt(32) is halfway in log(bytes).
  EXPECT_NEAR(curve.at(256 * kKiB * std::sqrt(32.0)), (31e9 + 12.5e9) / 2, 1.0);
  TopologyDesc unknown = host({}, {});
  EXPECT_EQ(unknown.copy_Bps(kMiB), 5e9);        // reduce_Bps
  EXPECT_EQ(unknown.cross_read_Bps(kMiB), 5e9);  // intra.bandwidth
}

// Xeon: at 256 KiB two copies cost 2/31 ns a byte against 1/13 for a read:
// staged. At 8 MiB 2/12.5 against 1/10.5: read. In between the rates cross
// where copy(b) = 2 read(b): with t = log(b / 256 KiB) / log(32),
// 31 - 18.5 t = 26 - 5 t, t = 0.37, about 930 KiB.
TEST(AllToAllStaging, TheXeonStagesSmallBlocksAndReadsLargeOnes) {
  const TopologyDesc topology = xeon();
  const ModelOptions options;
  for (double block : {4 * kKiB, 64 * kKiB, 256 * kKiB, 512 * kKiB}) {
    EXPECT_TRUE(stages_all_to_all_blocks(row(block), 0, topology, options)) << block;
  }
  for (double block : {1.25 * kMiB, 2 * kMiB, 8 * kMiB, 32 * kMiB}) {
    EXPECT_FALSE(stages_all_to_all_blocks(row(block), 0, topology, options)) << block;
  }
  // Against the inequality at every size from 4 KiB to 32 MiB.
  for (double block = 4 * kKiB; block <= 32 * kMiB; block *= 1.5) {
    const double staged = 2 * block / topology.copy_Bps(block);
    const double read = block / topology.cross_read_Bps(block);
    EXPECT_EQ(stages_all_to_all_blocks(row(block), 0, topology, options), staged <= read) << block;
  }
}

TEST(AllToAllStaging, TheEpycStagesEverySizeThatFitsTheArea) {
  const TopologyDesc topology = epyc();
  ModelOptions options;
  for (double block = 4 * kKiB; block <= 32 * kMiB; block *= 4) {
    EXPECT_TRUE(stages_all_to_all_blocks(row(block), 0, topology, options)) << block;
  }
  // The decision makes the prediction: 2 x 16 MiB per rank staged is two
  // meetings and three copies of a 16 MiB block (in, out, its own), at 13.5e9.
  const double n = 32 * kMiB;
  const double staged = 2 * 1e-6 + 3 * (n / 2) / 13.5e9;
  EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, topology), staged, 1e-12 * staged);
  // The same exchange on the Xeon is read: two meetings, one read and one copy of its own block, at 8 MiB's rates.
  const double read = 2e-6 + (n / 2) / 10.5e9 + (n / 2) / 12.5e9;
  EXPECT_NEAR(predict_seconds({Collective::AllToAll, n}, Algorithm::Pairwise, xeon()), read, 1e-12 * read);
  // A staging limit below the outgoing bytes forces reads whatever the rates.
  options.all_to_all_staging_limit = static_cast<size_t>(kMiB);
  EXPECT_FALSE(stages_all_to_all_blocks(row(2 * kMiB), 0, topology, options));
  EXPECT_TRUE(stages_all_to_all_blocks(row(kMiB), 0, topology, options));
}

// Four ranks with the rates probed for them on the Xeon VM (copy through the
// area and cross-memory read, GB/s at 4 KiB, 32 KiB, 256 KiB and 8 MiB
// blocks) and a meeting of `latency_s`, on `cores` cores.
TopologyDesc xeon_four_ranks(double cores, double latency_s) {
  TopologyDesc topology = host({{{4 * kKiB, 10.05e9}, {32 * kKiB, 13.30e9}, {256 * kKiB, 14.41e9}, {8 * kMiB, 6.33e9}}},
                               {{{4 * kKiB, 2.82e9}, {32 * kKiB, 10.84e9}, {256 * kKiB, 14.12e9}, {8 * kMiB, 4.83e9}}});
  topology.ranks_per_node = 4;
  topology.cores_per_node = cores;
  topology.intra.latency_s = latency_s;
  return topology;
}

// Rank 0 sends three blocks to its peers: staged, six copies (2 b / copy(b)
// each); read, three reads (b / read(b)) and, only where the four ranks share
// two cores, the meeting at the end, its latency times 4 ranks / 2 cores.
// Measured with comm-bench on that host: 4 ranks on 2 cores, 64 KiB per rank
// (16 KiB blocks) ran staged at 1.3-1.5x MPI and read at 0.9-1.2x; 1 MiB per
// rank (256 KiB blocks) read at 0.93-1.04x and staged at 0.76-0.84x.
TEST(AllToAllStaging, RanksOutnumberingTheirCoresWeighTheMeetingThatReadingCosts) {
  const ModelOptions options;
  for (double latency_s : {2.04e-6, 17.8e-6}) {
    for (double block = 4 * kKiB; block <= 8 * kMiB; block *= 2) {
      const std::vector<double> uniform = {block, block, block, block};
      const TopologyDesc shared = xeon_four_ranks(2, latency_s), own = xeon_four_ranks(4, latency_s);
      const double staged = 3 * 2 * block / shared.copy_Bps(block);
      const double read = 3 * block / shared.cross_read_Bps(block);
      EXPECT_EQ(stages_all_to_all_blocks(uniform, 0, own, options), staged <= read) << block;
      EXPECT_EQ(stages_all_to_all_blocks(uniform, 0, shared, options), staged <= read + latency_s * 4 / 2) << block;
    }
  }
  const std::vector<double> small(4, 16 * kKiB), large(4, 256 * kKiB);
  EXPECT_TRUE(stages_all_to_all_blocks(small, 0, xeon_four_ranks(2, 2.04e-6), options));
  EXPECT_FALSE(stages_all_to_all_blocks(small, 0, xeon_four_ranks(4, 2.04e-6), options));
  EXPECT_FALSE(stages_all_to_all_blocks(large, 0, xeon_four_ranks(2, 2.04e-6), options));
  // The loaded host's latency moves the crossing up (64 KiB blocks, 256 KiB per rank), not past it.
  EXPECT_TRUE(stages_all_to_all_blocks(std::vector<double>(4, 64 * kKiB), 0, xeon_four_ranks(2, 17.8e-6), options));
  EXPECT_FALSE(stages_all_to_all_blocks(large, 0, xeon_four_ranks(2, 17.8e-6), options));
  // A block past the exchange area is read either way: the meeting happens whatever the others do.
  ModelOptions small_area;
  small_area.staging_bytes = static_cast<size_t>(32 * kKiB);
  EXPECT_FALSE(stages_all_to_all_blocks({0, 16 * kKiB, 16 * kKiB, 16 * kKiB}, 0, xeon_four_ranks(2, 2.04e-6), small_area));
}

// Only the blocks that fit the exchange area count (the others are read
// either way), and the meeting staging spares is not weighed.
TEST(AllToAllStaging, OnlyBlocksThatFitTheAreaAreWeighed) {
  ModelOptions options;
  options.staging_bytes = static_cast<size_t>(kMiB);
  // Copies 2.5 times as fast as reads: a 1 MiB block and a 2 MiB one past the
  // area are staged, the small one alone weighed (2 / 25e9 < 1 / 10e9).
  TopologyDesc fast_copies = host({{{kKiB, 25e9}}}, {{{kKiB, 10e9}}});
  fast_copies.ranks_per_node = 3;
  EXPECT_TRUE(stages_all_to_all_blocks({0, kMiB, 2 * kMiB}, 0, fast_copies, options));
  // Equal rates: two copies cost twice one read, however small the block
  // (the meeting a read costs the sender is paid by a staged call's successor).
  TopologyDesc even = host({{{kKiB, 10e9}}}, {{{kKiB, 10e9}}});
  EXPECT_FALSE(stages_all_to_all_blocks({100, 100}, 0, even, options));
  // Nothing to send: staged (nobody reads the input).
  EXPECT_TRUE(stages_all_to_all_blocks({5e6, 0}, 0, even, options));
}

// The runtime scales the copy rate by the pace its copies run at now
// (comm/copy_pace.h). EPYC: 2 / 13.5 ns a byte staged against 1 / 4.7 read at
// the probe's pace; at half of it 2 / 6.75 > 1 / 4.7: read. Copies 1.5x the
// probe's make the Xeon stage 2 MiB blocks: 2 / (1.5 x 19.9) < 1 / 11.5
// (the curves at 2 MiB, t = 0.6: 31 - 18.5 t and 13 - 2.5 t GB/s), 2 / 19.9 > 1 / 11.5 at its own.
TEST(AllToAllStaging, TheCopiesPaceScalesTheirRate) {
  const ModelOptions options;
  EXPECT_TRUE(stages_all_to_all_blocks(row(64 * kKiB), 0, epyc(), options, 1.0));
  EXPECT_FALSE(stages_all_to_all_blocks(row(64 * kKiB), 0, epyc(), options, 0.5));
  // 0.69 of the probe's pace is the EPYC's break-even (2 x 4.7 / 13.5 = 0.696).
  EXPECT_TRUE(stages_all_to_all_blocks(row(64 * kKiB), 0, epyc(), options, 0.7));
  EXPECT_FALSE(stages_all_to_all_blocks(row(64 * kKiB), 0, epyc(), options, 0.69));
  EXPECT_FALSE(stages_all_to_all_blocks(row(2 * kMiB), 0, xeon(), options, 1.0));
  EXPECT_TRUE(stages_all_to_all_blocks(row(2 * kMiB), 0, xeon(), options, 1.5));
}

TEST(AllToAllStaging, NonsenseRatesAreRejected) {
  TopologyDesc topology = xeon();
  topology.copy.points = {{kMiB, 10e9}, {kKiB, 20e9}};
  EXPECT_THROW(topology.validate("test host"), Error);
  topology = xeon();
  topology.cross_read.points = {{kMiB, 0.0}};
  EXPECT_THROW(topology.validate("test host"), Error);
}

}  // namespace
}  // namespace strata::comm
