// Expert parallelism's exchanges in one process: bad inputs and attrs are refused naming the op and
// the input or attr at fault, and over a group of one rank (no group registered) the dispatch keeps
// every row where it is, so the return of the dispatch gives xs back (its unused rows zero) and the
// counts are group_sizes. The exchange across ranks is tests/parallel/mpi/expert_exchange_op_test.cpp.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

Attrs over(int64_t ranks, const std::string& group = "ep") { return {{"group", group}, {"ranks", ranks}}; }

Tensor sizes(const std::vector<int64_t>& counts, const Shape& shape = {}) {
  return make_indices(shape.empty() ? Shape{static_cast<int64_t>(counts.size())} : shape, counts, DType::I32);
}

TEST(ExpertExchangeSchemas, RefuseBadInputsAndAttrsNamingThem) {
  const std::string dispatch = "moe_dispatch_exchange", back = "moe_return_exchange";
  expect_error([&] { run_ref(dispatch, {f64({6, 3}), sizes({1, 1, 1, 1})}, over(3)); },
               {"'moe_dispatch_exchange'", "'ranks' (3)", "4 experts"});
  expect_error([&] { run_ref(back, {f64({6, 3}), sizes({1, 1, 1, 1}), sizes({1, 1, 1}, {3, 1})}, over(3)); },
               {"'moe_return_exchange'", "'ranks' (3)", "4 experts"});
  expect_error([&] { run_ref(dispatch, {f64({6, 3}), f64({4})}, over(1)); },
               {"'moe_dispatch_exchange'", "'group_sizes'", "i32", "f64"});
  expect_error([&] { run_ref(dispatch, {f64({6, 3}), sizes({1, 1, 1, 1}, {2, 2})}, over(1)); },
               {"'moe_dispatch_exchange'", "'group_sizes'", "[2, 2]"});
  expect_error([&] { run_ref(back, {f64({6, 3}), make_indices({4}, {1, 1, 1, 1}), sizes({1, 1, 1, 1}, {1, 4})},
                             over(1)); },
               {"'moe_return_exchange'", "'group_sizes'", "i64"});
  expect_error([&] { run_ref(back, {f64({6, 3}), sizes({1, 1, 1, 1}), sizes({1, 1, 1}, {1, 3})}, over(1)); },
               {"'moe_return_exchange'", "'received'", "[1, 4]", "[1, 3]"});
  expect_error([&] { run_ref(back, {f64({5, 3}), sizes({1, 1, 1, 1}), sizes({1, 1, 1, 1}, {2, 2})}, over(2)); },
               {"'moe_return_exchange'", "'ye'", "multiple of attr 'ranks'"});
  expect_error([&] { run_ref(dispatch, {make_indices({6, 3}, std::vector<int64_t>(18, 0)), sizes({1})}, over(1)); },
               {"'moe_dispatch_exchange'", "'xs'"});
  expect_error([&] { run_ref(dispatch, {f64({6, 3}), sizes({1, 1})}, over(1, "")); },
               {"'moe_dispatch_exchange'", "'group'"});
}

TEST(ExpertExchangeSchemas, RefuseCountsTheRowsCannotHold) {
  const std::string dispatch = "moe_dispatch_exchange";
  expect_error([&] { run_ref(dispatch, {f64({6, 3}), sizes({4, 3})}, over(1)); },
               {"'moe_dispatch_exchange'", "'group_sizes'", "7", "6 rows"});
  expect_error([&] { run_ref(dispatch, {f64({6, 3}), sizes({2, -1})}, over(1)); },
               {"'moe_dispatch_exchange'", "'group_sizes'", "-1", "expert 1"});
  expect_error([&] { run_ref("moe_return_exchange", {f64({6, 3}), sizes({1, 1}), sizes({4, 3}, {1, 2})}, over(1)); },
               {"'moe_return_exchange'", "'received'", "7", "6"});
  // A group of two ranks was built for, but no group is registered: a group of one.
  expect_error([&] { run_ref(dispatch, {f64({6, 3}), sizes({1, 1})}, over(2)); },
               {"'moe_dispatch_exchange'", "2 ranks", "'ep'", "has 1"});
}

TEST(ExpertExchangeOneRank, DispatchThenReturnIsTheIdentityOnTheRowsSent) {
  // Three experts, the middle one empty; row 5 unused (capacity).
  const Tensor xs = random_tensor({6, 3}, 11), group_sizes = sizes({2, 0, 3});
  const Tensors dispatched = run_ref("moe_dispatch_exchange", {xs, group_sizes}, over(1));
  std::vector<double> sent = values_of(xs);
  std::fill(sent.begin() + 5 * 3, sent.end(), 0.0);
  expect_all_near(dispatched[0], sent, 0, 0, "xe: xs in place, the unused row zero");
  EXPECT_EQ(values_of(dispatched[1]), (std::vector<double>{2, 0, 3})) << "local_sizes";
  EXPECT_EQ(dispatched[2].shape(), (Shape{1, 3}));
  EXPECT_EQ(values_of(dispatched[2]), (std::vector<double>{2, 0, 3})) << "received";
  const Tensor back = run_ref("moe_return_exchange", {dispatched[0], group_sizes, dispatched[2]}, over(1))[0];
  expect_all_near(back, sent, 0, 0, "the return of the dispatch");
  // The return ignores ye's rows past the counts.
  const Tensor ye = random_tensor({6, 3}, 12);
  std::vector<double> returned = values_of(ye);
  std::fill(returned.begin() + 5 * 3, returned.end(), 0.0);
  expect_all_near(run_ref("moe_return_exchange", {ye, group_sizes, dispatched[2]}, over(1))[0], returned, 0, 0,
                  "the return of ye");
}

}  // namespace
}  // namespace strata::testing
