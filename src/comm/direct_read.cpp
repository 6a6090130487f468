// Direct-read all-reduce for the ranks of one host: every rank reads the
// others' inputs straight out of their memory (Linux cross-memory attach,
// process_vm_readv) chunk by chunk into cache-sized buffers and sums all
// inputs, in rank order, into its own output. Ranks meet only twice per call:
// to learn where each input is, and to know nobody reads theirs any more.
// No rank waits for another's progress in between, which keeps it fast when
// ranks are descheduled (more processes than cores).

#include <cstring>
#include <vector>

#include "comm/algorithms.h"
#include "comm/group_state.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"
#include "comm/shared_segment.h"

namespace strata::comm {

void reduce_from_peers(const Context& ctx, const SharedSegment& segment, const ReduceBuffers& buffers, size_t first,
                       size_t length, bool copy_own, bool streaming) {
  const int p = ctx.size();
  const int me = ctx.rank();
  const size_t per_chunk = std::max<size_t>(1, ctx.chunk_bytes / sizeof(float));
  const size_t out_width = dtype_size(buffers.out_dtype);
  // One fp32 landing buffer per rank (this rank's used only with copy_own), plus room for raw bf16.
  ScratchPool::Lease landing = ScratchPool::instance().acquire((static_cast<size_t>(p) + 1) * per_chunk * sizeof(float));
  std::vector<const float*> sources(static_cast<size_t>(p));
  for (size_t start = first; start < first + length; start += per_chunk) {
    const size_t n = std::min(per_chunk, first + length - start);
    for (int rank = 0; rank < p; ++rank) {
      float* target = landing.floats() + static_cast<size_t>(rank) * per_chunk;
      if (rank == me) {
        if (copy_own) std::memcpy(target, buffers.own + start, n * sizeof(float));
        sources[static_cast<size_t>(rank)] = copy_own ? target : buffers.own + start;
        continue;
      }
      const SharedSegment::CallHeader& theirs = segment.header(rank);
      void* raw = theirs.input_width == sizeof(float) ? static_cast<void*>(target)
                                                       : landing.floats() + static_cast<size_t>(p) * per_chunk;
      if (theirs.staged) {
        std::memcpy(raw, segment.staged_data(rank) + start * theirs.input_width, n * theirs.input_width);
      } else {
        segment.read_peer(ctx.op, ctx.channel, rank, theirs.input_address + start * theirs.input_width, raw,
                          n * theirs.input_width, "input");
      }
      if (theirs.input_width != sizeof(float)) widen(target, raw, DType::BF16, n);
      sources[static_cast<size_t>(rank)] = target;
    }
    combine_all_final(static_cast<std::byte*>(buffers.out) + start * out_width, buffers.out_dtype, sources.data(), p,
                      n, buffers.op, buffers.divisor, streaming);
  }
}

bool stage_input(SharedSegment& segment, int me, const void* input, size_t bytes, size_t extra) {
  if (segment.staging_room(me, bytes + extra) < bytes + extra) return false;
  std::memcpy(segment.staged_data(me), input, bytes);
  return true;
}

Task direct_all_reduce(Context ctx, GroupState* group, Fingerprint call, const void* input, DType input_dtype,
                       ReduceBuffers buffers, size_t count) {
  const uint64_t sequence = ctx.op.label().sequence;
  co_await take_segment_for_header(ctx, group);
  SharedSegment& segment = *group->shm;
  const int me = ctx.rank();
  // Peers read this rank's input while it writes its output: a staged copy,
  // else the input itself, or in place its fp32 contribution (the widened copy of bf16, a snapshot of f32).
  const bool staged = stage_input(segment, me, input, count * dtype_size(input_dtype));
  const bool in_place = input == buffers.out && !staged;
  ScratchPool::Lease snapshot;
  if (in_place && static_cast<const void*>(buffers.own) == input) {
    snapshot = ScratchPool::instance().acquire(count * sizeof(float));
    std::memcpy(snapshot.floats(), buffers.own, count * sizeof(float));
    buffers.own = snapshot.floats();
  }
  segment.write_header(me, call, in_place ? static_cast<const void*>(buffers.own) : input,
                       in_place ? sizeof(float) : dtype_size(input_dtype)).staged = staged ? 1 : 0;
  co_await Meeting(ctx.op, segment, ctx.channel, Counter::Entered, sequence);
  segment.check_same_header(ctx.op);

  const bool streaming = count * dtype_size(buffers.out_dtype) >= kStreamingBytes;
  reduce_from_peers(ctx, segment, buffers, 0, count, false, streaming);
  // This rank's input must stay readable until every peer has finished with it.
  co_await Meeting(ctx.op, segment, ctx.channel, Counter::Finished, sequence);
  group->shm_queue.pop_front();
}

}  // namespace strata::comm
