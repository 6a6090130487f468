// The call check (comm/config.h's CallCheck). Before: ranks that disagree
// about a call all fail with an error naming both calls, before any data moves.
// Overlapped (the default): a call whose data paths cannot tell the difference
// (another reduction over the same bytes) throws on every rank instead of
// returning a wrong result. Agreeing calls run normally.
#include <gtest/gtest.h>

#include "core/error.h"
#include "mpi/comm_test_support.h"

namespace strata::comm::testing {
namespace {

Communicator& debug_world() {
  static Communicator world = [] {
    CommConfig config = test_config();
    config.call_check = CallCheck::Before;
    return Communicator::world(config);
  }();
  return world;
}

// The default configuration, as a program that sets nothing gets it.
Communicator& default_world() {
  static Communicator world = [] {
    CommConfig config = test_config();
    config.call_check = CommConfig{}.call_check;
    return Communicator::world(config);
  }();
  return world;
}

TEST(DebugCheck, AgreeingCallsRun) {
  Communicator& world = debug_world();
  std::vector<float> in(10, 1.0f), out(10);
  world.all_reduce(in.data(), out.data(), 10, DType::F32, ReduceOp::Sum);
  for (float value : out) EXPECT_EQ(value, static_cast<float>(world.size()));
  world.barrier();
}

TEST(DebugCheck, DifferentCountsAreReportedOnEveryRank) {
  Communicator& world = debug_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  size_t count = world.rank() == 0 ? 10 : 11;
  std::vector<float> in(11, 1.0f), out(11);
  try {
    world.all_reduce(in.data(), out.data(), count, DType::F32, ReduceOp::Sum, Algorithm::Ring);
    ADD_FAILURE() << "the mismatch went unnoticed";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("disagree"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 0 made call"), std::string::npos) << message;
    EXPECT_NE(message.find("all_reduce(count 10, f32, sum, ring)"), std::string::npos) << message;
    EXPECT_NE(message.find("all_reduce(count 11, f32, sum, ring)"), std::string::npos) << message;
  }
  // Still in step afterwards.
  float one = 1.0f, sum = 0.0f;
  world.all_reduce(&one, &sum, 1, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(sum, static_cast<float>(world.size()));
}

TEST(DebugCheck, DifferentCollectivesAreReported) {
  Communicator& world = debug_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  float value = 1.0f, sum = 0.0f;
  try {
    if (world.rank() == world.size() - 1) {
      world.broadcast(&value, 1, DType::F32, 0);
    } else {
      world.all_reduce(&value, &sum, 1, DType::F32, ReduceOp::Sum);
    }
    ADD_FAILURE() << "the mismatch went unnoticed";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("broadcast(count 1, f32, root 0"), std::string::npos) << message;
    EXPECT_NE(message.find("all_reduce(count 1, f32, sum"), std::string::npos) << message;
  }
}

TEST(OverlappedCheck, AgreeingCallsRunOnEveryAlgorithm) {
  Communicator& world = default_world();
  for (Algorithm algorithm : {Algorithm::Ring, Algorithm::RecursiveHalvingDoubling, Algorithm::Mpi}) {
    std::vector<float> in(1000, 2.0f), out(1000);
    world.all_reduce(in.data(), out.data(), in.size(), DType::F32, ReduceOp::Sum, algorithm);
    for (float value : out) ASSERT_EQ(value, 2.0f * static_cast<float>(world.size())) << algorithm_name(algorithm);
  }
}

TEST(OverlappedCheck, SumOnOneRankAndMaxOnAnotherThrowsOnEveryRank) {
  Communicator& world = default_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  for (Algorithm algorithm : {Algorithm::Ring, Algorithm::Mpi}) {
    ReduceOp mine = world.rank() == 0 ? ReduceOp::Max : ReduceOp::Sum;
    std::vector<float> in(64, static_cast<float>(world.rank() + 1)), out(64);
    try {
      world.all_reduce(in.data(), out.data(), in.size(), DType::F32, mine, algorithm);
      ADD_FAILURE() << "a sum on some ranks and a max on another went unnoticed with " << algorithm_name(algorithm);
    } catch (const Error& error) {
      std::string message = error.what();
      EXPECT_NE(message.find("disagree about a call"), std::string::npos) << message;
      EXPECT_NE(message.find("rank 0 made call"), std::string::npos) << message;
      EXPECT_NE(message.find("f32, max, " + std::string(algorithm_name(algorithm))), std::string::npos) << message;
      EXPECT_NE(message.find("f32, sum, " + std::string(algorithm_name(algorithm))), std::string::npos) << message;
    }
  }
  // Still in step afterwards.
  float one = 1.0f, sum = 0.0f;
  world.all_reduce(&one, &sum, 1, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(sum, static_cast<float>(world.size()));
}

}  // namespace
}  // namespace strata::comm::testing
