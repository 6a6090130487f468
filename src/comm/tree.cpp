// Binomial trees: lg p rounds of whole-buffer messages, the latency-optimal
// shape for small messages.
#include "comm/algorithms.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"

namespace strata::comm {

Task binomial_broadcast(Context ctx, void* data, size_t bytes, int root) {
  const int p = ctx.size();
  if (bytes == 0 || p == 1) co_return;
  const int relative = (ctx.rank() - root + p) % p;
  auto real = [&](int relative_rank) { return (relative_rank + root) % p; };
  int mask = 1;
  while (mask < p) {
    if (relative & mask) {
      co_await exchange(ctx, -1, nullptr, 0, real(relative - mask), data, bytes);
      break;
    }
    mask *= 2;
  }
  for (mask /= 2; mask > 0; mask /= 2) {
    if (relative + mask < p) co_await exchange(ctx, real(relative + mask), data, bytes, -1, nullptr, 0);
  }
}

Task binomial_all_reduce(Context ctx, ReduceBuffers buffers, size_t count) {
  const int p = ctx.size();
  const int r = ctx.rank();
  if (count == 0) co_return;
  const float* current = buffers.own;
  ScratchPool::Lease incoming;
  for (int mask = 1; mask < p; mask *= 2) {
    if (r & mask) {
      co_await exchange(ctx, r - mask, current, count * sizeof(float), -1, nullptr, 0);
      break;
    }
    if (r + mask < p) {
      if (!incoming.bytes()) incoming = ScratchPool::instance().acquire(count * sizeof(float));
      co_await exchange(ctx, -1, nullptr, 0, r + mask, incoming.floats(), count * sizeof(float));
      combine(buffers.partial, current, incoming.floats(), count, buffers.op);
      current = buffers.partial;
    }
  }
  if (r == 0) store_final(buffers.out, buffers.out_dtype, current, count, buffers.divisor);
  co_await binomial_broadcast(ctx, buffers.out, count * dtype_size(buffers.out_dtype), 0);
}

}  // namespace strata::comm
