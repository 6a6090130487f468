// Pass-through to the MPI library's own collectives, as a baseline and a
// fallback. The non-blocking forms keep the timeout: a stuck rank is reported
// like any other, though MPI cannot say which peer is missing.
#include <algorithm>
#include <climits>
#include <vector>

#include "comm/algorithms.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"
#include "core/error.h"

namespace strata::comm {
namespace {

constexpr size_t kMaxMpiCount = static_cast<size_t>(INT_MAX);

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

}  // namespace

Task mpi_all_reduce(Context ctx, ReduceBuffers buffers, size_t count) {
  if (count == 0) co_return;
  for (size_t done = 0; done < count;) {
    size_t piece = std::min(count - done, kMaxMpiCount);
    RequestSet requests(ctx.op, ctx.channel, ctx.tag, 1);
    MPI_Request request;
    const void* source = buffers.own == buffers.partial ? MPI_IN_PLACE : static_cast<const void*>(buffers.own + done);
    MPI_Iallreduce(source, buffers.partial + done, static_cast<int>(piece), MPI_FLOAT, mpi_op(buffers.op),
                   ctx.channel.comm, &request);
    requests.adopt(0, request);
    co_await requests.all();
    done += piece;
  }
  store_final(buffers.out, buffers.out_dtype, buffers.partial, count, buffers.divisor);
}

Task mpi_reduce_scatter(Context ctx, ReduceBuffers buffers, size_t block_count) {
  if (block_count == 0) co_return;
  if (block_count > kMaxMpiCount) fail("mpi reduce_scatter: {} elements per rank exceed MPI's int count", block_count);
  ScratchPool::Lease mine = ScratchPool::instance().acquire(block_count * sizeof(float));
  RequestSet requests(ctx.op, ctx.channel, ctx.tag, 1);
  MPI_Request request;
  MPI_Ireduce_scatter_block(buffers.own, mine.floats(), static_cast<int>(block_count), MPI_FLOAT, mpi_op(buffers.op),
                            ctx.channel.comm, &request);
  requests.adopt(0, request);
  co_await requests.all();
  store_final(buffers.out, buffers.out_dtype, mine.floats(), block_count, buffers.divisor);
}

Task mpi_all_gather(Context ctx, void* data, size_t block_bytes) {
  if (block_bytes == 0) co_return;
  if (block_bytes > kMaxMpiCount) fail("mpi all_gather: {} bytes per rank exceed MPI's int count", block_bytes);
  RequestSet requests(ctx.op, ctx.channel, ctx.tag, 1);
  MPI_Request request;
  MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, static_cast<int>(block_bytes), MPI_BYTE, ctx.channel.comm,
                 &request);
  requests.adopt(0, request);
  co_await requests.all();
}

Task mpi_broadcast(Context ctx, void* data, size_t bytes, int root) {
  for (size_t done = 0; done < bytes;) {
    size_t piece = std::min(bytes - done, kMaxMessageBytes);
    RequestSet requests(ctx.op, ctx.channel, ctx.tag, 1);
    MPI_Request request;
    MPI_Ibcast(static_cast<std::byte*>(data) + done, static_cast<int>(piece), MPI_BYTE, root, ctx.channel.comm,
               &request);
    requests.adopt(0, request);
    co_await requests.all();
    done += piece;
  }
}

Task mpi_all_to_all(Context ctx, const void* in, void* out, const ExchangeLayout& layout, size_t width) {
  const size_t p = static_cast<size_t>(ctx.size());
  // MPI counts are ints: bytes of each block and their displacements.
  std::vector<int> send_counts(p), send_displs(p), recv_counts(p), recv_displs(p);
  auto to_int = [&](uint64_t elements) {
    uint64_t bytes = elements * width;
    if (bytes > kMaxMpiCount) fail("mpi all_to_all: {} bytes exceed MPI's int count", bytes);
    return static_cast<int>(bytes);
  };
  for (size_t i = 0; i < p; ++i) {
    send_counts[i] = to_int(layout.send[i].count);
    send_displs[i] = to_int(layout.send[i].offset);
    recv_counts[i] = to_int(layout.recv[i].count);
    recv_displs[i] = to_int(layout.recv[i].offset);
  }
  RequestSet requests(ctx.op, ctx.channel, ctx.tag, 1);
  MPI_Request request;
  MPI_Ialltoallv(in, send_counts.data(), send_displs.data(), MPI_BYTE, out, recv_counts.data(), recv_displs.data(),
                 MPI_BYTE, ctx.channel.comm, &request);
  requests.adopt(0, request);
  co_await requests.all();
}

}  // namespace strata::comm
