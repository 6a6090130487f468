#include "comm/bench_exchange.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "comm/bench_pattern.h"
#include "core/error.h"

namespace strata::comm {
namespace {

size_t offset_of(const std::vector<size_t>& counts, int rank) {
  return std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
}

std::vector<int> mpi_counts(const std::vector<size_t>& counts) {
  std::vector<int> result;
  for (size_t count : counts) {
    if (count > static_cast<size_t>(INT_MAX)) fail("comm-bench: {} elements exceed MPI's int count", count);
    result.push_back(static_cast<int>(count));
  }
  return result;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> result(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) result[i] = result[i - 1] + counts[i - 1];
  return result;
}

}  // namespace

std::vector<size_t> bench_exchange_counts(size_t total, int ranks, double skew) {
  std::vector<double> weights(static_cast<size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) weights[static_cast<size_t>(rank)] = std::pow(rank + 1.0, -skew);
  double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<size_t> counts(static_cast<size_t>(ranks));
  size_t given = 0;
  for (size_t rank = 0; rank < counts.size(); ++rank) {
    counts[rank] = static_cast<size_t>(std::floor(static_cast<double>(total) * weights[rank] / sum));
    given += counts[rank];
  }
  counts[0] += total - given;
  return counts;
}

void run_exchange(Communicator& group, const BenchOptions& options, const void* in, void* out,
                  const std::vector<size_t>& counts, Algorithm algorithm) {
  if (options.op == Collective::AllToAll) {
    group.all_to_all(in, out, counts[0], options.dtype, algorithm);
    return;
  }
  std::vector<size_t> received(counts.size(), counts[static_cast<size_t>(group.rank())]);
  group.all_to_all_v(in, counts, out, received, options.dtype, algorithm);
}

namespace {

void fill_mpi_counts(const std::vector<size_t>& counts, int rank, MpiExchangeCounts& mpi) {
  mpi.send_counts = mpi_counts(counts);
  mpi.send_displs = displacements(mpi.send_counts);
  mpi.recv_counts.assign(counts.size(), mpi.send_counts[static_cast<size_t>(rank)]);
  mpi.recv_displs = displacements(mpi.recv_counts);
}

}  // namespace

MPI_Request start_exchange_baseline(const BenchOptions& options, MPI_Comm comm, const void* in, void* out,
                                    const std::vector<size_t>& counts, int rank, MpiExchangeCounts& mpi) {
  MPI_Request request = MPI_REQUEST_NULL;
  fill_mpi_counts(counts, rank, mpi);
  if (options.op == Collective::AllToAll) {
    MPI_Ialltoall(in, mpi.send_counts[0], MPI_FLOAT, out, mpi.send_counts[0], MPI_FLOAT, comm, &request);
    return request;
  }
  MPI_Ialltoallv(in, mpi.send_counts.data(), mpi.send_displs.data(), MPI_FLOAT, out, mpi.recv_counts.data(),
                 mpi.recv_displs.data(), MPI_FLOAT, comm, &request);
  return request;
}

void run_blocking_exchange_baseline(const BenchOptions& options, MPI_Comm comm, const void* in, void* out,
                                    const std::vector<size_t>& counts, int rank) {
  MpiExchangeCounts mpi;
  fill_mpi_counts(counts, rank, mpi);
  if (options.op == Collective::AllToAll) {
    MPI_Alltoall(in, mpi.send_counts[0], MPI_FLOAT, out, mpi.send_counts[0], MPI_FLOAT, comm);
    return;
  }
  MPI_Alltoallv(in, mpi.send_counts.data(), mpi.send_displs.data(), MPI_FLOAT, out, mpi.recv_counts.data(),
                mpi.recv_displs.data(), MPI_FLOAT, comm);
}

long long exchange_wrong(const BenchOptions& options, const void* out, const std::vector<size_t>& counts, int rank) {
  const size_t mine = counts[static_cast<size_t>(rank)];
  const size_t first = offset_of(counts, rank);
  long long wrong = 0;
  for (size_t from = 0; from < counts.size(); ++from) {
    for (size_t i = 0; i < mine; ++i) {
      wrong += bench_load(out, options.dtype, from * mine + i) != bench_pattern(static_cast<int>(from), first + i);
    }
  }
  return wrong;
}

namespace {

// Bytes sender i sends rank j: every sender sends the same counts.
std::vector<std::vector<double>> exchange_bytes(const BenchOptions& options, const std::vector<size_t>& counts) {
  const double width = static_cast<double>(dtype_size(options.dtype));
  std::vector<std::vector<double>> bytes(counts.size());
  for (auto& row : bytes) {
    for (size_t count : counts) row.push_back(static_cast<double>(count) * width);
  }
  return bytes;
}

}  // namespace

std::string exchange_blocks_label(const ExchangeTally& group_total) {
  const uint64_t blocks = group_total.staged + group_total.read;
  if (blocks == 0) return "";
  if (group_total.read == 0) return "staged";
  if (group_total.staged == 0) return "read";
  const double percent = 100.0 * static_cast<double>(group_total.staged) / static_cast<double>(blocks);
  return fmt::format("staged {:.0f}%", std::clamp(percent, 1.0, 99.0));
}

Cost predict_exchange(const BenchOptions& options, const std::vector<size_t>& counts, Algorithm algorithm,
                      const TopologyDesc& topology, const ModelOptions& model) {
  const double width = static_cast<double>(dtype_size(options.dtype));
  if (options.op == Collective::AllToAll) {
    CallShape shape{options.op, static_cast<double>(counts[0] * counts.size()) * width, options.dtype};
    return predict(shape, algorithm, topology, model);
  }
  return predict_all_to_all_v(exchange_bytes(options, counts), topology, model, algorithm);
}

}  // namespace strata::comm
