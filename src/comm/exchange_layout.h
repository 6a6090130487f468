#pragma once
// Where an all-to-all's blocks lie: for every peer, the element range this
// rank sends it (in the input) and receives from it (in the output). Blocks
// are packed in rank order; all_to_all is the uniform case.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::comm {

struct ExchangeLayout {
  // One block, in elements. Two plain words: peers read them straight out of
  // this rank's memory (the direct pairwise exchange).
  struct Block {
    uint64_t offset = 0;
    uint64_t count = 0;
  };
  std::vector<Block> send;  // by receiving rank
  std::vector<Block> recv;  // by sending rank

  static ExchangeLayout uniform(size_t count, int ranks);
  // Throws strata::Error naming `what` unless both spans hold `ranks` counts.
  static ExchangeLayout packed(std::span<const size_t> send_counts, std::span<const size_t> recv_counts, int ranks,
                               const char* what);
  uint64_t send_total() const { return send.empty() ? 0 : send.back().offset + send.back().count; }
  uint64_t recv_total() const { return recv.empty() ? 0 : recv.back().offset + recv.back().count; }
};

}  // namespace strata::comm
