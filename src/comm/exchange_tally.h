#pragma once
// How the one-host pairwise all-to-all moved its peers' blocks: staged through
// the exchange area, or read from the sender's input. Its choice follows the
// pace its copies run at now (copy_pace.h), which the cost model's plan at the
// probe's rates cannot know, so comm-bench labels a row with what its timed
// calls did. Counted for the whole process (comm-bench times one group's calls
// at a time); two relaxed additions a call.
#include <atomic>
#include <cstdint>

namespace strata::comm {

// Blocks that are not empty.
struct ExchangeTally {
  uint64_t staged = 0;  // went through the exchange area
  uint64_t read = 0;    // read from the sender's input
};

class ExchangeTallies {
 public:
  static void add(const ExchangeTally& call) {
    staged_.fetch_add(call.staged, std::memory_order_relaxed);
    read_.fetch_add(call.read, std::memory_order_relaxed);
  }
  // The blocks counted since the last take.
  static ExchangeTally take() {
    return {staged_.exchange(0, std::memory_order_relaxed), read_.exchange(0, std::memory_order_relaxed)};
  }

 private:
  static inline std::atomic<uint64_t> staged_{0};
  static inline std::atomic<uint64_t> read_{0};
};

}  // namespace strata::comm
