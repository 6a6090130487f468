// The pairwise all-to-all of one host's ranks by direct reads: each rank
// publishes where its input and its block table are, then reads the block
// every peer holds for it straight into its output (process_vm_readv: one
// copy, no message matching), starting with the next rank so that readers
// spread over the senders. Ranks meet only on entry and when nobody reads
// their input any more, so a descheduled peer delays no one's reads but its own.
#include <unistd.h>

#include <cstring>

#include "comm/algorithms.h"
#include "comm/cross_memory.h"
#include "comm/group_state.h"
#include "comm/shared_segment.h"
#include "core/error.h"
#include "core/file_io.h"

namespace strata::comm {
namespace {

std::string peer_label(const Channel& channel, int rank) {
  int world = channel.world_rank[static_cast<size_t>(rank)];
  return fmt::format("peer rank {} (world rank {} on {})", channel.group_rank[static_cast<size_t>(rank)], world,
                     world_hostname(world));
}

}  // namespace

Task direct_all_to_all(Context ctx, GroupState* group, const void* in, void* out, const ExchangeLayout& layout,
                       size_t width) {
  const uint64_t sequence = ctx.op.label().sequence;
  co_await SegmentTurn(ctx.op, group->shm_queue, sequence);
  const SharedSegment& segment = *group->shm;
  const int p = ctx.size();
  const int me = ctx.rank();
  SharedSegment::CallHeader& mine = segment.header(me);
  mine.sequence = sequence;
  mine.count = 0;
  mine.input_address = reinterpret_cast<uint64_t>(in);
  mine.input_width = width;
  mine.pid = getpid();
  mine.layout_address = reinterpret_cast<uint64_t>(layout.send.data());
  segment.counter(me, Counter::Entered).store(sequence, std::memory_order_release);
  auto* target = static_cast<std::byte*>(out);
  const auto& own = layout.send[static_cast<size_t>(me)];
  std::memcpy(target + layout.recv[static_cast<size_t>(me)].offset * width,
              static_cast<const std::byte*>(in) + own.offset * width, own.count * width);
  CounterWait entered(ctx.op, segment, ctx.channel, Counter::Entered);
  co_await entered.until(sequence);
  for (int k = 1; k < p; ++k) {
    const int from = (me + k) % p;
    const SharedSegment::CallHeader& theirs = segment.header(from);
    if (theirs.sequence != sequence || theirs.input_width != width) {
      ctx.op.abort_with(fmt::format("{} is in call #{} with {}-byte elements, this rank in call #{} with {}: the ranks "
                                    "disagree about this call (STRATA_COMM_CHECK=before names the difference)",
                                    peer_label(ctx.channel, from), theirs.sequence, theirs.input_width, sequence, width));
    }
    const pid_t pid = static_cast<pid_t>(theirs.pid);
    ExchangeLayout::Block block;
    int error = read_remote(pid, theirs.layout_address + static_cast<uint64_t>(me) * sizeof(block), &block, sizeof(block));
    const auto& expected = layout.recv[static_cast<size_t>(from)];
    if (error == 0 && block.count != expected.count) {
      ctx.op.abort_with(fmt::format("{} sends {} elements where this rank expects {}: the ranks disagree about the "
                                    "counts of this call",
                                    peer_label(ctx.channel, from), block.count, expected.count));
    }
    if (error == 0) {
      error = read_remote(pid, theirs.input_address + block.offset * width, target + expected.offset * width,
                          block.count * width);
    }
    if (error != 0) {
      ctx.op.abort_with(fmt::format("cannot read the input of {} (pid {}): {}", peer_label(ctx.channel, from),
                                    theirs.pid, errno_text(error)));
    }
  }
  // This rank's input and block table must stay readable until every peer has read them.
  segment.counter(me, Counter::Finished).store(sequence, std::memory_order_release);
  CounterWait finished(ctx.op, segment, ctx.channel, Counter::Finished);
  co_await finished.until(sequence);
  group->shm_queue.pop_front();
}

}  // namespace strata::comm
