// Shared-memory all-reduce for the ranks of one host. Chunk by chunk, each
// rank copies its fp32 contribution into its slot of the shared segment once,
// then sums every rank's slot, in rank order, straight into its own output:
// the data crosses memory about as often as in one memcpy, and waiting is a
// look at another rank's counter, not a message. Up to kSlots chunks are
// copied ahead of the one being summed.
#include <cstring>

#include "comm/algorithms.h"
#include "comm/group_state.h"
#include "comm/reduce_kernels.h"
#include "comm/shared_segment.h"

namespace strata::comm {

Task shm_all_reduce(Context ctx, GroupState* group, Fingerprint call, ReduceBuffers buffers, size_t count) {
  const uint64_t sequence = ctx.op.label().sequence;
  co_await SegmentTurn(ctx.op, group->shm_queue, sequence);
  const SharedSegment& segment = *group->shm;
  const int p = ctx.size();
  const int me = ctx.rank();
  const size_t per_chunk = segment.slot_bytes() / sizeof(float);
  const uint64_t chunks = (count + per_chunk - 1) / per_chunk;
  const uint64_t first = group->shm_next_chunk;
  group->shm_next_chunk += chunks;
  const size_t width = dtype_size(buffers.out_dtype);
  // Results this large leave the caches anyway: write them around the caches.
  const bool streaming = count * width >= kStreamingBytes;

  CounterWait everyone_published(ctx.op, segment, ctx.channel, Counter::Published);
  CounterWait everyone_consumed(ctx.op, segment, ctx.channel, Counter::Consumed);
  std::vector<const float*> sources(static_cast<size_t>(p));
  uint64_t copied = 0;
  for (uint64_t c = 0; c < chunks; ++c) {
    while (copied < chunks && copied < c + SharedSegment::kSlots) {
      uint64_t chunk = first + copied;
      // The slot is free once every rank has summed the chunk it held before.
      if (chunk >= SharedSegment::kSlots) co_await everyone_consumed.until(chunk - SharedSegment::kSlots + 1);
      size_t start = copied * per_chunk;
      std::memcpy(segment.slot(me, chunk), buffers.own + start, std::min(per_chunk, count - start) * sizeof(float));
      segment.label(me, chunk, call);
      segment.counter(me, Counter::Published).store(chunk + 1, std::memory_order_release);
      ++copied;
    }
    uint64_t chunk = first + c;
    co_await everyone_published.until(chunk + 1);
    segment.check_same_call(ctx.op, chunk);
    size_t start = c * per_chunk;
    for (int rank = 0; rank < p; ++rank) sources[static_cast<size_t>(rank)] = segment.slot(rank, chunk);
    combine_all_final(static_cast<std::byte*>(buffers.out) + start * width, buffers.out_dtype, sources.data(), p,
                      std::min(per_chunk, count - start), buffers.op, buffers.divisor, streaming);
    segment.counter(me, Counter::Consumed).store(chunk + 1, std::memory_order_release);
  }
  group->shm_queue.pop_front();
}

}  // namespace strata::comm
