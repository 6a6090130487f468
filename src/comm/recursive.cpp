// Recursive algorithms on the power-of-two core of the group (see Fold in
// block_layout.h): ranks folded away hand over their data first and receive
// the result last.
#include "comm/algorithms.h"
#include "comm/block_layout.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"

namespace strata::comm {
namespace {

constexpr size_t kFloat = sizeof(float);

std::byte* at(void* base, size_t element, size_t width) { return static_cast<std::byte*>(base) + element * width; }

// Gathers the virtual ranks' ranges of `data` by recursive doubling (distance
// 1 first); each virtual rank starts with its own range complete.
Task doubling_gather(Context ctx, Fold fold, void* data, size_t width, std::vector<size_t> starts) {
  const int v = fold.virtual_rank(ctx.rank());
  for (int mask = 1; mask < fold.pof2; mask *= 2) {
    int partner = v ^ mask;
    int mine = v / mask * mask;
    int theirs = partner / mask * mask;
    size_t my_start = starts[static_cast<size_t>(mine)];
    size_t my_end = starts[static_cast<size_t>(mine + mask)];
    size_t their_start = starts[static_cast<size_t>(theirs)];
    size_t their_end = starts[static_cast<size_t>(theirs + mask)];
    int peer = fold.real_rank(partner);
    co_await exchange(ctx, peer, at(data, my_start, width), (my_end - my_start) * width, peer,
                      at(data, their_start, width), (their_end - their_start) * width);
  }
}

// Recursive halving (distance pof2/2 first) over the virtual ranges: at the
// end this virtual rank holds the complete sums of its own range, in
// `partial`, or written finished into `out` when `finish_into_out`.
Task halving_reduce(Context ctx, Fold fold, ReduceBuffers buffers, const float* current, std::vector<size_t> starts,
                    bool finish_into_out) {
  const int v = fold.virtual_rank(ctx.rank());
  auto range = [&](int from, int to) { return starts[static_cast<size_t>(to)] - starts[static_cast<size_t>(from)]; };
  // The first step keeps the largest range.
  int first_half = fold.pof2 / 2;
  size_t landing = v < first_half ? range(0, first_half) : range(first_half, fold.pof2);
  ScratchPool::Lease incoming = ScratchPool::instance().acquire(landing * kFloat);
  size_t out_width = dtype_size(buffers.out_dtype);
  int lo = 0, hi = fold.pof2;
  while (hi - lo > 1) {
    int half = (hi - lo) / 2, mid = lo + half;
    bool lower = v < mid;
    int keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
    int give_lo = lower ? mid : lo, give_hi = lower ? hi : mid;
    size_t keep = starts[static_cast<size_t>(keep_lo)];
    size_t keep_length = range(keep_lo, keep_hi);
    size_t give = starts[static_cast<size_t>(give_lo)];
    size_t give_length = range(give_lo, give_hi);
    int peer = fold.real_rank(lower ? v + half : v - half);
    co_await exchange(ctx, peer, current + give, give_length * kFloat, peer, incoming.floats(), keep_length * kFloat);
    if (hi - lo == 2 && finish_into_out) {
      combine_final(at(buffers.out, keep, out_width), buffers.out_dtype, current + keep, incoming.floats(),
                    keep_length, buffers.op, buffers.divisor);
    } else {
      combine(buffers.partial + keep, current + keep, incoming.floats(), keep_length, buffers.op);
      current = buffers.partial;
    }
    lo = keep_lo;
    hi = keep_hi;
  }
}

// The odd rank of a folded pair takes its even partner's whole contribution;
// returns what this rank reduces from now on.
Task fold_in_contribution(Context ctx, Fold fold, ReduceBuffers buffers, size_t count, const float** current) {
  const int r = ctx.rank();
  *current = buffers.own;
  if (fold.folded_away(r)) {
    co_await exchange(ctx, r + 1, buffers.own, count * kFloat, -1, nullptr, 0);
  } else if (fold.absorbs_partner(r)) {
    ScratchPool::Lease incoming = ScratchPool::instance().acquire(count * kFloat);
    co_await exchange(ctx, -1, nullptr, 0, r - 1, incoming.floats(), count * kFloat);
    combine(buffers.partial, buffers.own, incoming.floats(), count, buffers.op);
    *current = buffers.partial;
  }
}

// A group of one has nothing to exchange: its own contribution is the result.
bool finished_alone(const Context& ctx, const ReduceBuffers& buffers, size_t count) {
  if (ctx.size() != 1) return false;
  store_final(buffers.out, buffers.out_dtype, buffers.own, count, buffers.divisor);
  return true;
}

}  // namespace

Task rhd_all_reduce(Context ctx, ReduceBuffers buffers, size_t count) {
  const int r = ctx.rank();
  if (count == 0 || finished_alone(ctx, buffers, count)) co_return;
  Fold fold(ctx.size());
  size_t width = dtype_size(buffers.out_dtype);
  const float* current = nullptr;
  co_await fold_in_contribution(ctx, fold, buffers, count, &current);
  if (fold.folded_away(r)) {
    co_await exchange(ctx, -1, nullptr, 0, r + 1, buffers.out, count * width);
    co_return;
  }
  std::vector<size_t> starts = even_virtual_ranges(count, fold.pof2);
  co_await halving_reduce(ctx, fold, buffers, current, starts, true);
  co_await doubling_gather(ctx, fold, buffers.out, width, starts);
  if (fold.absorbs_partner(r)) co_await exchange(ctx, r - 1, buffers.out, count * width, -1, nullptr, 0);
}

Task rhd_reduce_scatter(Context ctx, ReduceBuffers buffers, size_t block_count) {
  const int r = ctx.rank();
  if (block_count == 0 || finished_alone(ctx, buffers, block_count)) co_return;
  Fold fold(ctx.size());
  size_t count = block_count * static_cast<size_t>(ctx.size());
  const float* current = nullptr;
  co_await fold_in_contribution(ctx, fold, buffers, count, &current);
  if (fold.folded_away(r)) {
    // The partner sends this rank's block as finished fp32 sums.
    ScratchPool::Lease mine = ScratchPool::instance().acquire(block_count * kFloat);
    co_await exchange(ctx, -1, nullptr, 0, r + 1, mine.floats(), block_count * kFloat);
    store_final(buffers.out, buffers.out_dtype, mine.floats(), block_count, buffers.divisor);
    co_return;
  }
  co_await halving_reduce(ctx, fold, buffers, current, block_virtual_ranges(fold, block_count), false);
  store_final(buffers.out, buffers.out_dtype, buffers.partial + static_cast<size_t>(r) * block_count, block_count,
              buffers.divisor);
  if (fold.absorbs_partner(r)) {
    co_await exchange(ctx, r - 1, buffers.partial + static_cast<size_t>(r - 1) * block_count, block_count * kFloat,
                      -1, nullptr, 0);
  }
}

Task rd_all_reduce(Context ctx, ReduceBuffers buffers, size_t count) {
  const int r = ctx.rank();
  if (count == 0 || finished_alone(ctx, buffers, count)) co_return;
  Fold fold(ctx.size());
  size_t width = dtype_size(buffers.out_dtype);
  const float* current = nullptr;
  co_await fold_in_contribution(ctx, fold, buffers, count, &current);
  if (fold.folded_away(r)) {
    co_await exchange(ctx, -1, nullptr, 0, r + 1, buffers.out, count * width);
    co_return;
  }
  const int v = fold.virtual_rank(r);
  ScratchPool::Lease incoming = ScratchPool::instance().acquire(count * kFloat);
  for (int mask = 1; mask < fold.pof2; mask *= 2) {
    int peer = fold.real_rank(v ^ mask);
    co_await exchange(ctx, peer, current, count * kFloat, peer, incoming.floats(), count * kFloat);
    if (mask * 2 == fold.pof2) {
      combine_final(buffers.out, buffers.out_dtype, current, incoming.floats(), count, buffers.op, buffers.divisor);
    } else {
      combine(buffers.partial, current, incoming.floats(), count, buffers.op);
      current = buffers.partial;
    }
  }
  if (fold.absorbs_partner(r)) co_await exchange(ctx, r - 1, buffers.out, count * width, -1, nullptr, 0);
}

Task rd_all_gather(Context ctx, void* data, size_t block_bytes) {
  const int r = ctx.rank();
  const int p = ctx.size();
  if (block_bytes == 0 || p == 1) co_return;
  Fold fold(p);
  size_t total = block_bytes * static_cast<size_t>(p);
  if (fold.folded_away(r)) {
    co_await exchange(ctx, r + 1, at(data, static_cast<size_t>(r), block_bytes), block_bytes, -1, nullptr, 0);
    co_await exchange(ctx, -1, nullptr, 0, r + 1, data, total);
    co_return;
  }
  if (fold.absorbs_partner(r)) {
    co_await exchange(ctx, -1, nullptr, 0, r - 1, at(data, static_cast<size_t>(r - 1), block_bytes), block_bytes);
  }
  co_await doubling_gather(ctx, fold, data, 1, block_virtual_ranges(fold, block_bytes));
  if (fold.absorbs_partner(r)) co_await exchange(ctx, r - 1, data, total, -1, nullptr, 0);
}

}  // namespace strata::comm
