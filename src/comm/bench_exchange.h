#pragma once
// comm-bench's all_to_all and all_to_all_v: how many elements each rank
// receives from every sender (uniform, or skewed toward low ranks as expert
// loads are), the calls, their check and their MPI baseline. Internal to bench.cpp.
#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "comm/bench.h"
#include "comm/exchange_tally.h"

namespace strata::comm {

// Elements every sender sends to each rank, `total` per sender: equal shares
// (skew 0), or Zipf shares, rank j's weight 1 / (j + 1)^skew, the rounding
// left over going to rank 0.
std::vector<size_t> bench_exchange_counts(size_t total, int ranks, double skew);

// One call of `op` (all_to_all: equal counts) with this rank's counts.
void run_exchange(Communicator& group, const BenchOptions& options, const void* in, void* out,
                  const std::vector<size_t>& counts, Algorithm algorithm);
// MPI's int counts and displacements of an MPI_Ialltoallv, alive until it completes.
struct MpiExchangeCounts {
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
};
// The MPI library's MPI_Ialltoall(v) of the same call, on f32.
MPI_Request start_exchange_baseline(const BenchOptions& options, MPI_Comm comm, const void* in, void* out,
                                    const std::vector<size_t>& counts, int rank, MpiExchangeCounts& mpi);
// The same as the blocking MPI_Alltoall(v), as a plain MPI program calls it.
void run_blocking_exchange_baseline(const BenchOptions& options, MPI_Comm comm, const void* in, void* out,
                                    const std::vector<size_t>& counts, int rank);
// Elements of this rank's output that differ from what the senders' inputs hold.
long long exchange_wrong(const BenchOptions& options, const void* out, const std::vector<size_t>& counts, int rank);
// The model's time of the call for `algorithm` (calibrated with `model`, or not).
Cost predict_exchange(const BenchOptions& options, const std::vector<size_t>& counts, Algorithm algorithm,
                      const TopologyDesc& topology, const ModelOptions& model);

// How the one-host pairwise exchange moved the timed calls' blocks, from every
// rank's tally summed: "staged", "read", or "staged N%" (of the blocks) when
// calls or senders differed; empty where no block was exchanged that way.
std::string exchange_blocks_label(const ExchangeTally& group_total);

}  // namespace strata::comm
