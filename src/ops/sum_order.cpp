#include "ops/sum_order.h"

#include <atomic>

#include "core/error.h"

namespace strata {
namespace {

std::atomic<SumOrder> current{SumOrder::Natural};

}  // namespace

void set_sum_order(SumOrder order) { current.store(order, std::memory_order_relaxed); }

SumOrder sum_order() { return current.load(std::memory_order_relaxed); }

SumOrder parse_sum_order(std::string_view text, std::string_view key) {
  if (text == "natural") return SumOrder::Natural;
  if (text == "permuted") return SumOrder::Permuted;
  fail("key '{}' must be \"natural\" or \"permuted\", got \"{}\"", key, text);
}

}  // namespace strata
