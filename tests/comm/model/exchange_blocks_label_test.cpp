// comm-bench's label of how the one-host all-to-all moved a row's blocks.
#include <gtest/gtest.h>

#include "comm/bench_exchange.h"

namespace strata::comm {
namespace {

TEST(ExchangeBlocksLabel, NamesThePathOrTheStagedShare) {
  EXPECT_EQ(exchange_blocks_label({0, 0}), "");
  EXPECT_EQ(exchange_blocks_label({12, 0}), "staged");
  EXPECT_EQ(exchange_blocks_label({0, 7}), "read");
  EXPECT_EQ(exchange_blocks_label({1, 3}), "staged 25%");
  // A mixed row never reads as all one way.
  EXPECT_EQ(exchange_blocks_label({1, 999}), "staged 1%");
  EXPECT_EQ(exchange_blocks_label({999, 1}), "staged 99%");
}

}  // namespace
}  // namespace strata::comm
