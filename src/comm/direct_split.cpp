// Direct-read all-reduce, split into a reduce-scatter and an all-gather: each
// rank reads its slice of every peer's input (cross-memory attach), sums the
// p slices in rank order into its output, and once every slice is reduced
// reads the other reduced slices straight from their owners' outputs. Every
// rank moves 2(p - 1)/p of the buffer and sums 1/p of it, against p - 1
// buffers read and summed by `direct`; it pays a third meeting for that.
// Each slice is reduced once, so every rank gets the same bits. In place is
// safe: a peer reads this rank's slice of another rank's index only before
// the middle meeting, and this rank overwrites those slices only after it.
// Where the exchange area has room, each rank first copies its input there
// and, once reduced, its slice after it: peers then copy from shared memory
// instead of reading by cross-memory attach (see kDefaultStagingBytes).
#include <cstring>

#include "comm/algorithms.h"
#include "comm/block_layout.h"
#include "comm/group_state.h"
#include "comm/shared_segment.h"

namespace strata::comm {

Task direct_split_all_reduce(Context ctx, GroupState* group, Fingerprint call, const void* input, DType input_dtype,
                             ReduceBuffers buffers, size_t count) {
  const uint64_t sequence = ctx.op.label().sequence;
  co_await take_segment_for_header(ctx, group);
  SharedSegment& segment = *group->shm;
  const int p = ctx.size();
  const int me = ctx.rank();
  const size_t in_width = dtype_size(input_dtype), out_width = dtype_size(buffers.out_dtype);
  const BlockLayout slices{count, p};
  const size_t input_bytes = count * in_width, slice_bytes = slices.size(me) * out_width;
  // Staged, the area holds the input and then this rank's reduced slice.
  const bool staged = stage_input(segment, me, input, input_bytes, slice_bytes);
  SharedSegment::CallHeader& header = segment.write_header(me, call, input, in_width);
  header.output_address = reinterpret_cast<uint64_t>(buffers.out);
  header.staged = staged ? 1 : 0;
  co_await Meeting(ctx.op, segment, ctx.channel, Counter::Entered, sequence);
  segment.check_same_header(ctx.op);

  // This rank's own chunk is copied first: in place its output slice is its input slice.
  reduce_from_peers(ctx, segment, buffers, slices.offset(me), slices.size(me), true, false);
  if (staged) {
    std::memcpy(segment.staged_data(me) + input_bytes,
                static_cast<const std::byte*>(buffers.out) + slices.offset(me) * out_width, slice_bytes);
  }
  co_await Meeting(ctx.op, segment, ctx.channel, Counter::Reduced, sequence);

  for (int k = 1; k < p; ++k) {
    const int from = (me + k) % p;
    const size_t offset = slices.offset(from) * out_width;
    auto* target = static_cast<std::byte*>(buffers.out) + offset;
    const SharedSegment::CallHeader& theirs = segment.header(from);
    if (theirs.staged) {
      std::memcpy(target, segment.staged_data(from) + count * theirs.input_width, slices.size(from) * out_width);
    } else {
      segment.read_peer(ctx.op, ctx.channel, from, theirs.output_address + offset, target,
                        slices.size(from) * out_width, "reduced slice");
    }
  }
  // This rank's input and reduced slice must stay readable until every peer has finished with them.
  co_await Meeting(ctx.op, segment, ctx.channel, Counter::Finished, sequence);
  group->shm_queue.pop_front();
}

}  // namespace strata::comm
