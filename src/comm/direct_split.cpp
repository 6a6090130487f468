// Direct-read all-reduce, split into a reduce-scatter and an all-gather: each
// rank reads its slice of every peer's input (cross-memory attach), sums the
// p slices in rank order into its output, and once every slice is reduced
// reads the other reduced slices straight from their owners' outputs. Every
// rank moves 2(p - 1)/p of the buffer and sums 1/p of it, against p - 1
// buffers read and summed by `direct`; it pays a third meeting for that.
// Each slice is reduced once, so every rank gets the same bits. In place is
// safe: a peer reads this rank's slice of another rank's index only before
// the middle meeting, and this rank overwrites those slices only after it.
#include <cstring>

#include "comm/algorithms.h"
#include "comm/block_layout.h"
#include "comm/cross_memory.h"
#include "comm/group_state.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"
#include "comm/shared_segment.h"
#include "core/error.h"
#include "core/file_io.h"

namespace strata::comm {
namespace {

// Reads `bytes` at `address` of `rank`'s process; aborts naming the peer when it cannot.
void read_peer(const Context& ctx, const SharedSegment::CallHeader& theirs, int rank, uint64_t address, void* target,
               size_t bytes) {
  int error = read_remote(static_cast<pid_t>(theirs.pid), address, target, bytes);
  if (error == 0) return;
  int world = ctx.channel.world_rank[static_cast<size_t>(rank)];
  ctx.op.abort_with(fmt::format("cannot read the memory of peer rank {} (world rank {} on {}, pid {}): {}",
                                ctx.channel.group_rank[static_cast<size_t>(rank)], world, world_hostname(world),
                                theirs.pid, errno_text(error)));
}

// Sums this rank's slice [first, first + length) of every input into the output, chunk by chunk.
void reduce_slice(const Context& ctx, const SharedSegment& segment, const ReduceBuffers& buffers, size_t first,
                  size_t length) {
  const int p = ctx.size();
  const int me = ctx.rank();
  const size_t per_chunk = std::max<size_t>(1, ctx.chunk_bytes / sizeof(float));
  const size_t out_width = dtype_size(buffers.out_dtype);
  // One fp32 landing buffer per rank (this rank's holds its own chunk: the
  // output may be its input), plus room for raw bf16.
  ScratchPool::Lease landing = ScratchPool::instance().acquire((static_cast<size_t>(p) + 1) * per_chunk * sizeof(float));
  std::vector<const float*> sources(static_cast<size_t>(p));
  for (size_t start = first; start < first + length; start += per_chunk) {
    const size_t n = std::min(per_chunk, first + length - start);
    for (int rank = 0; rank < p; ++rank) {
      float* target = landing.floats() + static_cast<size_t>(rank) * per_chunk;
      sources[static_cast<size_t>(rank)] = target;
      if (rank == me) {
        std::memcpy(target, buffers.own + start, n * sizeof(float));
        continue;
      }
      const SharedSegment::CallHeader& theirs = segment.header(rank);
      void* raw = theirs.input_width == sizeof(float) ? static_cast<void*>(target)
                                                       : landing.floats() + static_cast<size_t>(p) * per_chunk;
      read_peer(ctx, theirs, rank, theirs.input_address + start * theirs.input_width, raw, n * theirs.input_width);
      if (theirs.input_width != sizeof(float)) widen(target, raw, DType::BF16, n);
    }
    combine_all_final(static_cast<std::byte*>(buffers.out) + start * out_width, buffers.out_dtype, sources.data(), p,
                      n, buffers.op, buffers.divisor, false);
  }
}

}  // namespace

Task direct_split_all_reduce(Context ctx, GroupState* group, Fingerprint call, const void* input, DType input_dtype,
                             ReduceBuffers buffers, size_t count) {
  const uint64_t sequence = ctx.op.label().sequence;
  co_await take_segment_for_header(ctx, group);
  const SharedSegment& segment = *group->shm;
  const int p = ctx.size();
  const int me = ctx.rank();
  segment.write_header(me, call, input, dtype_size(input_dtype)).output_address =
      reinterpret_cast<uint64_t>(buffers.out);
  segment.counter(me, Counter::Entered).store(sequence, std::memory_order_release);
  CounterWait entered(ctx.op, segment, ctx.channel, Counter::Entered);
  co_await entered.until(sequence);
  segment.check_same_header(ctx.op);

  const BlockLayout slices{count, p};
  reduce_slice(ctx, segment, buffers, slices.offset(me), slices.size(me));
  segment.counter(me, Counter::Reduced).store(sequence, std::memory_order_release);
  CounterWait reduced(ctx.op, segment, ctx.channel, Counter::Reduced);
  co_await reduced.until(sequence);

  const size_t out_width = dtype_size(buffers.out_dtype);
  for (int k = 1; k < p; ++k) {
    const int from = (me + k) % p;
    const size_t offset = slices.offset(from) * out_width;
    const SharedSegment::CallHeader& theirs = segment.header(from);
    read_peer(ctx, theirs, from, theirs.output_address + offset, static_cast<std::byte*>(buffers.out) + offset,
              slices.size(from) * out_width);
  }
  // This rank's input and reduced slice must stay readable until every peer has finished with them.
  segment.counter(me, Counter::Finished).store(sequence, std::memory_order_release);
  CounterWait finished(ctx.op, segment, ctx.channel, Counter::Finished);
  co_await finished.until(sequence);
  group->shm_queue.pop_front();
}

}  // namespace strata::comm
