#pragma once
// How algorithms cut a buffer among ranks. Shared by the algorithms and the
// cost model, so both count the same bytes.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace strata::comm {

// `count` elements in `parts` blocks; the first count % parts blocks hold one more.
struct BlockLayout {
  size_t count = 0;
  int parts = 1;

  size_t offset(int block) const {
    size_t base = count / static_cast<size_t>(parts);
    size_t extra = count % static_cast<size_t>(parts);
    size_t index = static_cast<size_t>(block);
    return index * base + std::min(index, extra);
  }
  size_t size(int block) const { return offset(block + 1) - offset(block); }
  size_t largest() const { return size(0); }
};

// Recursive algorithms run on a power-of-two group: the p - 2^floor(lg p) extra
// ranks fold into a partner first (MPICH's scheme). Among the first 2*extra
// ranks each even rank hands its data to the odd rank above it and waits for
// the result; everyone else takes a virtual rank in [0, pof2).
struct Fold {
  int ranks = 1;
  int pof2 = 1;
  int extra = 0;

  explicit Fold(int group_size) : ranks(group_size) {
    while (pof2 * 2 <= ranks) pof2 *= 2;
    extra = ranks - pof2;
  }
  bool folded_away(int rank) const { return rank < 2 * extra && rank % 2 == 0; }
  bool absorbs_partner(int rank) const { return rank < 2 * extra && rank % 2 == 1; }
  int virtual_rank(int rank) const {
    if (rank < 2 * extra) return rank % 2 == 1 ? rank / 2 : -1;
    return rank - extra;
  }
  int real_rank(int virtual_rank) const {
    return virtual_rank < extra ? 2 * virtual_rank + 1 : virtual_rank + extra;
  }
  // Virtual rank v speaks for the real ranks (blocks) [first_block(v), first_block(v + 1)).
  int first_block(int virtual_rank) const {
    return virtual_rank < extra ? 2 * virtual_rank : virtual_rank + extra;
  }
};

// Element ranges of the virtual ranks (pof2 + 1 offsets): an even split of the
// whole buffer (all_reduce) ...
inline std::vector<size_t> even_virtual_ranges(size_t count, int pof2) {
  BlockLayout layout{count, pof2};
  std::vector<size_t> starts(static_cast<size_t>(pof2) + 1);
  for (int v = 0; v <= pof2; ++v) starts[static_cast<size_t>(v)] = layout.offset(v);
  return starts;
}

// ... or the per-rank blocks of `block_count` elements each that every virtual
// rank speaks for (reduce_scatter, all_gather).
inline std::vector<size_t> block_virtual_ranges(const Fold& fold, size_t block_count) {
  std::vector<size_t> starts(static_cast<size_t>(fold.pof2) + 1);
  for (int v = 0; v < fold.pof2; ++v) {
    starts[static_cast<size_t>(v)] = static_cast<size_t>(fold.first_block(v)) * block_count;
  }
  starts[static_cast<size_t>(fold.pof2)] = static_cast<size_t>(fold.ranks) * block_count;
  return starts;
}

}  // namespace strata::comm
