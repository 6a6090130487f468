// Direct-read all-reduce, split into a reduce-scatter and an all-gather: each
// rank reads its slice of every peer's input (cross-memory attach), sums the
// p slices in rank order into its output, and once every slice is reduced
// reads the other reduced slices straight from their owners' outputs. Every
// rank moves 2(p - 1)/p of the buffer and sums 1/p of it, against p - 1
// buffers read and summed by `direct`; it pays a third meeting for that.
// Each slice is reduced once, so every rank gets the same bits. In place is
// safe: a peer reads this rank's slice of another rank's index only before
// the middle meeting, and this rank overwrites those slices only after it.
#include "comm/algorithms.h"
#include "comm/block_layout.h"
#include "comm/group_state.h"
#include "comm/shared_segment.h"

namespace strata::comm {

Task direct_split_all_reduce(Context ctx, GroupState* group, Fingerprint call, const void* input, DType input_dtype,
                             ReduceBuffers buffers, size_t count) {
  const uint64_t sequence = ctx.op.label().sequence;
  co_await take_segment_for_header(ctx, group);
  const SharedSegment& segment = *group->shm;
  const int p = ctx.size();
  const int me = ctx.rank();
  segment.write_header(me, call, input, dtype_size(input_dtype)).output_address =
      reinterpret_cast<uint64_t>(buffers.out);
  co_await Meeting(ctx.op, segment, ctx.channel, Counter::Entered, sequence);
  segment.check_same_header(ctx.op);

  const BlockLayout slices{count, p};
  // This rank's own chunk is copied first: in place its output slice is its input slice.
  reduce_from_peers(ctx, segment, buffers, slices.offset(me), slices.size(me), true, false);
  co_await Meeting(ctx.op, segment, ctx.channel, Counter::Reduced, sequence);

  const size_t out_width = dtype_size(buffers.out_dtype);
  for (int k = 1; k < p; ++k) {
    const int from = (me + k) % p;
    const size_t offset = slices.offset(from) * out_width;
    segment.read_peer(ctx.op, ctx.channel, from, segment.header(from).output_address + offset,
                      static_cast<std::byte*>(buffers.out) + offset, slices.size(from) * out_width, "reduced slice");
  }
  // This rank's input and reduced slice must stay readable until every peer has finished with them.
  co_await Meeting(ctx.op, segment, ctx.channel, Counter::Finished, sequence);
  group->shm_queue.pop_front();
}

}  // namespace strata::comm
