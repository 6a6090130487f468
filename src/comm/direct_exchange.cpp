// The pairwise all-to-all of one host's ranks. Each rank publishes its call
// and a block table in the shared segment. Where the cost model finds two
// copies cheaper than one cross-memory read (stages_all_to_all_blocks, from
// the probed copy and read rates, the copies' at the pace they run now:
// copy_pace.h), the blocks that fit its exchange area are
// staged there (a copy in, a copy out); the others stay in its input, and receivers read them
// straight from it (process_vm_readv: one copy, no message matching), starting
// with the next rank so that readers spread over the senders; a rank copies
// its own block while it waits for the first peer, or else last. Ranks meet on
// entry; a rank whose input was read also waits at the end until nobody reads
// it any more, while a rank that staged everything leaves at once (its next
// call that rewrites the area waits for the readers instead).

#include <cstring>
#include <vector>

#include "comm/algorithms.h"
#include "comm/exchange_tally.h"
#include "comm/group_state.h"
#include "comm/shared_segment.h"
#include "core/streamed_copy.h"

namespace strata::comm {
namespace {

// A rank's own block from this size up is copied with streaming stores
// (core/streamed_copy.h): past the cache they save reading each output line
// before writing it. 2 ranks on the 2-core EPYC VM against MPI_Alltoall
// (launches alternating, 8 with and 4 without, median ratio): 8-64 MiB per
// rank (own blocks of 4-32 MiB) 0.99-1.02 -> 1.10-1.16; with own blocks of
// 0.5-2 MiB no gain (the pair's blocks still partly cached).
constexpr size_t kStreamedOwnBlockBytes = size_t{4} << 20;

// Fills this rank's block table, staging what fits when the cost model, with
// the copy rate at the pace this rank's copies run now, says staging pays; a
// call that would read every block stages one now and then to time the copies
// again (CopyPace). Returns whether any block stays in the input.
bool publish_blocks(SharedSegment& segment, GroupState& group, int me, const std::byte* source,
                    const ExchangeLayout& layout, size_t width) {
  SharedSegment::ExchangeBlock* table = segment.exchange_table(me);
  std::byte* staged = segment.staged_data(me);
  std::vector<double> row(layout.send.size());
  for (size_t to = 0; to < row.size(); ++to) row[to] = static_cast<double>(layout.send[to].count * width);
  const uint64_t outgoing = (layout.send_total() - layout.send[static_cast<size_t>(me)].count) * width;
  // Paced only with a core per rank: where ranks share cores, a copy's time says whether
  // its rank kept the core, not where the ranks sit (4 ranks on 2 cores read more, and slower).
  CopyPace& pace = group.copy_pace;
  const bool paced = group.topology.has_core_per_rank(row.size());
  const bool stage_all =
      stages_all_to_all_blocks(row, me, group.topology, group.model, paced ? pace.factor() : 1.0);
  // A check stages one block only where staging would pay at the fastest pace seen: past the
  // cache, copies at memory bandwidth never beat one read, and checking would only cost.
  const bool timed = paced && static_cast<double>(outgoing) >= CopyPace::kTimedBytes;
  const bool check = !stage_all && timed && outgoing <= group.model.all_to_all_staging_limit &&
                     pace.check_due(CopyPace::Clock::now()) &&
                     stages_all_to_all_blocks(row, me, group.topology, group.model, pace.fastest());
  // A check stages the first block that is not empty: only its room is needed.
  uint64_t wanted = stage_all ? outgoing : 0;
  for (size_t to = 0; check && wanted == 0 && to < row.size(); ++to) {
    if (static_cast<int>(to) != me) wanted = layout.send[to].count * width;
  }
  const uint64_t room = wanted > 0 ? segment.staging_room(me, wanted) : 0;
  CopyPace::Clock::time_point start{};
  if (timed && room > 0) start = CopyPace::Clock::now();
  uint64_t used = 0;
  size_t staged_blocks = 0;
  ExchangeTally tally;  // blocks that are not empty
  bool unstaged = false;
  for (size_t to = 0; to < layout.send.size(); ++to) {
    const uint64_t offset = layout.send[to].offset * width;
    const uint64_t bytes = layout.send[to].count * width;
    if (static_cast<int>(to) == me) continue;
    const bool stages = used + bytes <= room && (stage_all || (staged_blocks == 0 && bytes > 0));
    if (stages) {
      std::memcpy(staged + used, source + offset, bytes);
      table[to] = {used, bytes, 1};
      used += bytes;
      ++staged_blocks;
      tally.staged += bytes > 0 ? 1 : 0;
    } else {
      table[to] = {offset, bytes, 0};
      tally.read += bytes > 0 ? 1 : 0;
      unstaged = true;
    }
  }
  ExchangeTallies::add(tally);
  if (timed && used > 0) {
    const auto end = CopyPace::Clock::now();
    const double copied = static_cast<double>(used);
    pace.record(copied, std::chrono::duration<double>(end - start).count(),
                group.topology.copy_Bps(copied / static_cast<double>(staged_blocks)), end);
  }
  return unstaged;
}

// Copies the block `from` left for this rank into `target`; aborts on a disagreement or an unreadable peer.
void take_block(const Context& ctx, const SharedSegment& segment, int from, std::byte* target,
                uint64_t expected_bytes) {
  const int me = ctx.rank();
  const SharedSegment::ExchangeBlock block = segment.exchange_table(from)[me];
  if (block.bytes != expected_bytes) {
    ctx.op.abort_with(fmt::format("{} sends {} bytes where this rank expects {}: the ranks disagree about the "
                                  "counts of this call",
                                  peer_label(ctx.channel, from), block.bytes, expected_bytes));
  }
  if (block.staged) {
    std::memcpy(target, segment.staged_data(from) + block.offset, block.bytes);
    return;
  }
  segment.read_peer(ctx.op, ctx.channel, from, segment.header(from).input_address + block.offset, target, block.bytes,
                    "input");
}

}  // namespace

Task take_segment_for_header(Context ctx, GroupState* group) {
  co_await SegmentTurn(ctx.op, group->shm_queue, ctx.op.label().sequence);
  if (group->unread_exchange == 0) co_return;
  CounterWait finished(ctx.op, *group->shm, ctx.channel, Counter::Finished);
  co_await finished.until(group->unread_exchange);
  group->unread_exchange = 0;
}

Task direct_all_to_all(Context ctx, GroupState* group, Fingerprint call, const void* in, void* out,
                       const ExchangeLayout& layout, size_t width) {
  const uint64_t sequence = ctx.op.label().sequence;
  co_await take_segment_for_header(ctx, group);
  SharedSegment& segment = *group->shm;
  const int p = ctx.size();
  const int me = ctx.rank();
  const auto* source = static_cast<const std::byte*>(in);
  auto* target = static_cast<std::byte*>(out);
  segment.write_header(me, call, in, width);
  const bool input_read = publish_blocks(segment, *group, me, source, layout, width);
  segment.counter(me, Counter::Entered).store(sequence, std::memory_order_release);
  // Each peer's block is taken as soon as that peer has entered (in order
  // from the next rank), not after everyone has: with more ranks than cores,
  // whoever runs gets on with the peers already there.
  CounterWait entered(ctx.op, segment, ctx.channel, Counter::Entered);
  std::vector<char> taken(static_cast<size_t>(p), 0);
  taken[static_cast<size_t>(me)] = 1;
  // This rank's own block (input to output) is copied while no peer's block
  // is ready, else last, so the copy overlaps the peers still reading.
  bool own_copied = false;
  auto copy_own = [&] {
    const auto& own = layout.send[static_cast<size_t>(me)];
    std::byte* own_target = target + layout.recv[static_cast<size_t>(me)].offset * width;
    const size_t bytes = own.count * width;
    if (bytes >= kStreamedOwnBlockBytes) {
      copy_streamed(source + own.offset * width, own_target, bytes);
    } else {
      std::memcpy(own_target, source + own.offset * width, bytes);
    }
    own_copied = true;
  };
  auto any_ready = [&] {
    for (int from = 0; from < p; ++from) {
      if (!taken[static_cast<size_t>(from)] &&
          segment.counter(from, Counter::Entered).load(std::memory_order_acquire) >= sequence) {
        return true;
      }
    }
    return false;
  };
  for (int left = p - 1; left > 0;) {
    if (!own_copied && !any_ready()) copy_own();
    co_await entered.any_until(sequence, taken);
    for (int k = 1; k < p; ++k) {
      const int from = (me + k) % p;
      if (taken[static_cast<size_t>(from)] || !entered.reached(from)) continue;
      if (!(segment.header(from).call == call)) {
        co_await entered.until(sequence);  // to name every rank's call
        segment.check_same_header(ctx.op);
      }
      const auto& expected = layout.recv[static_cast<size_t>(from)];
      take_block(ctx, segment, from, target + expected.offset * width, expected.count * width);
      taken[static_cast<size_t>(from)] = 1;
      --left;
    }
  }
  segment.counter(me, Counter::Finished).store(sequence, std::memory_order_release);
  if (!own_copied) copy_own();
  if (input_read) {
    // This rank's input must stay readable until every peer has read it.
    CounterWait finished(ctx.op, segment, ctx.channel, Counter::Finished);
    co_await finished.until(sequence);
  } else {
    group->unread_exchange = sequence;
  }
  group->shm_queue.pop_front();
}

}  // namespace strata::comm
