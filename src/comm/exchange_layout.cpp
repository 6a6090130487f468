#include "comm/exchange_layout.h"

#include "core/error.h"

namespace strata::comm {
namespace {

std::vector<ExchangeLayout::Block> pack(std::span<const size_t> counts) {
  std::vector<ExchangeLayout::Block> blocks(counts.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    blocks[i] = {offset, counts[i]};
    offset += counts[i];
  }
  return blocks;
}

}  // namespace

ExchangeLayout ExchangeLayout::uniform(size_t count, int ranks) {
  std::vector<size_t> counts(static_cast<size_t>(ranks), count);
  return {pack(counts), pack(counts)};
}

ExchangeLayout ExchangeLayout::packed(std::span<const size_t> send_counts, std::span<const size_t> recv_counts,
                                      int ranks, const char* what) {
  if (send_counts.size() != static_cast<size_t>(ranks) || recv_counts.size() != static_cast<size_t>(ranks)) {
    fail("{}: {} send counts and {} receive counts for a group of {} ranks (one count per rank each)", what,
         send_counts.size(), recv_counts.size(), ranks);
  }
  return {pack(send_counts), pack(recv_counts)};
}

}  // namespace strata::comm
