#include "comm/algorithms.h"
#include "comm/block_layout.h"
#include "comm/scratch.h"
#include "core/error.h"

namespace strata::comm {

Task flat_all_reduce(Context ctx, Algorithm algorithm, ReduceBuffers buffers, size_t count) {
  switch (algorithm) {
    case Algorithm::Ring: co_await ring_all_reduce(ctx, buffers, count); break;
    case Algorithm::RecursiveHalvingDoubling: co_await rhd_all_reduce(ctx, buffers, count); break;
    case Algorithm::RecursiveDoubling: co_await rd_all_reduce(ctx, buffers, count); break;
    case Algorithm::BinomialTree: co_await binomial_all_reduce(ctx, buffers, count); break;
    case Algorithm::Mpi: co_await mpi_all_reduce(ctx, buffers, count); break;
    default: STRATA_CHECK(false, "{} is not a flat all_reduce", algorithm_name(algorithm));
  }
}


Task hierarchical_all_reduce(Context local, Context column, ReduceBuffers buffers, size_t count, Algorithm across) {
  if (count == 0) co_return;
  size_t width = dtype_size(buffers.out_dtype);
  BlockLayout parts{count, local.size()};
  size_t part_offset = parts.offset(local.rank());
  size_t part_length = parts.size(local.rank());
  // 1. Inside the node: this rank ends with its part summed over the node, in fp32.
  ScratchPool::Lease part = ScratchPool::instance().acquire(part_length * sizeof(float));
  ReduceBuffers inside = buffers;
  inside.out = part.floats();
  inside.out_dtype = DType::F32;
  inside.divisor = 1.0f;
  co_await ring_reduce_scatter(local, inside, count);
  // 2. Across nodes: the ranks holding the same part on every node finish it.
  ReduceBuffers between = buffers;
  between.own = part.floats();
  between.partial = part.floats();
  between.out = static_cast<std::byte*>(buffers.out) + part_offset * width;
  co_await flat_all_reduce(column, across, between, part_length);
  // 3. Inside the node: gather the finished parts.
  co_await ring_all_gather(local, buffers.out, count, width);
}

}  // namespace strata::comm
