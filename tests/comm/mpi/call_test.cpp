// Non-blocking calls, send/recv, barrier, tensors and the argument checks.
#include <gtest/gtest.h>

#include "core/error.h"
#include "mpi/comm_test_support.h"

namespace strata::comm::testing {
namespace {

TEST(Calls, ManyCallsInFlightFinishWhateverTheWaitOrder) {
  Communicator& world = flat_world();
  const int p = world.size();
  constexpr int kCalls = 6;
  std::vector<std::vector<float>> inputs(kCalls), outputs(kCalls);
  std::vector<Handle> handles;
  for (int c = 0; c < kCalls; ++c) {
    size_t count = 100 + 37 * static_cast<size_t>(c);
    inputs[c].assign(count, static_cast<float>(world.rank() + c));
    outputs[c].assign(count, -1.0f);
    Algorithm algorithm = kConcreteAlgorithms[static_cast<size_t>(c) % 4];
    handles.push_back(world.all_reduce_async(inputs[c].data(), outputs[c].data(), count, DType::F32, ReduceOp::Sum,
                                             algorithm));
  }
  // Poll the last one until done, then wait for the rest backwards.
  while (!handles.back().test()) {
  }
  for (int c = kCalls - 1; c >= 0; --c) handles[static_cast<size_t>(c)].wait();
  for (int c = 0; c < kCalls; ++c) {
    float want = 0.0f;
    for (int rank = 0; rank < p; ++rank) want += static_cast<float>(rank + c);
    for (float value : outputs[c]) ASSERT_EQ(value, want) << "call " << c;
  }
}

TEST(Calls, SharedMemoryCallsInFlightTakeTheSegmentInOrder) {
  Communicator& world = flat_world();
  if (!applicable(Algorithm::SharedMemory, {Collective::AllReduce, 4.0}, world.topology())) {
    GTEST_SKIP() << "no shared segment for this group";
  }
  const int p = world.size();
  // Sizes spanning the slots (4 x 4096 floats), so the calls queue for the
  // segment and chunk numbers run on from call to call.
  const std::vector<size_t> counts = {12000, 1, 16384, 0, 5000};
  std::vector<std::vector<float>> data(counts.size());
  std::vector<Handle> handles;
  for (size_t c = 0; c < counts.size(); ++c) {
    data[c].resize(std::max<size_t>(counts[c], 1));
    for (size_t i = 0; i < counts[c]; ++i) data[c][i] = static_cast<float>((world.rank() + 1) * (c + 1) + i % 5);
    handles.push_back(world.all_reduce_async(data[c].data(), data[c].data(), counts[c], DType::F32, ReduceOp::Sum,
                                             Algorithm::SharedMemory));
  }
  EXPECT_EQ(world.last_decision().algorithm, Algorithm::SharedMemory);
  for (size_t c = counts.size(); c-- > 0;) handles[c].wait();
  for (size_t c = 0; c < counts.size(); ++c) {
    for (size_t i = 0; i < counts[c]; ++i) {
      float want = 0.0f;
      for (int rank = 0; rank < p; ++rank) want += static_cast<float>((rank + 1) * (c + 1) + i % 5);
      ASSERT_EQ(data[c][i], want) << "call " << c << " element " << i;
    }
  }
}

TEST(Calls, SendAndRecvAroundARing) {
  Communicator& world = flat_world();
  const int p = world.size();
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  int right = (world.rank() + 1) % p, left = (world.rank() + p - 1) % p;
  std::vector<bf16> out(513), in(513);
  for (size_t i = 0; i < out.size(); ++i) out[i] = float_to_bf16(static_cast<float>(world.rank() * 8 + i % 8));  // exact in bf16
  Handle receiving = world.recv_async(in.data(), in.size(), DType::BF16, left);
  world.send(out.data(), out.size(), DType::BF16, right);
  receiving.wait();
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(bf16_to_float(in[i]), static_cast<float>(left * 8 + i % 8));
}

TEST(Calls, BarrierAndTensors) {
  Communicator& world = flat_world();
  const int p = world.size();
  world.barrier();
  Tensor tensor = Tensor::zeros({3, 5}, DType::F32);
  for (int i = 0; i < 15; ++i) tensor.data<float>()[i] = static_cast<float>(world.rank() * i);
  world.all_reduce(tensor, ReduceOp::Avg);
  float ranks_sum = static_cast<float>(p * (p - 1) / 2);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(tensor.data<float>()[i], ranks_sum * i / static_cast<float>(p));

  Tensor piece = Tensor::zeros({2}, DType::BF16);
  piece.data<bf16>()[0] = float_to_bf16(static_cast<float>(world.rank()));
  piece.data<bf16>()[1] = float_to_bf16(-static_cast<float>(world.rank()));
  Tensor all = Tensor::zeros({p, 2}, DType::BF16);
  world.all_gather(piece, all);
  for (int rank = 0; rank < p; ++rank) EXPECT_EQ(bf16_to_float(all.data<bf16>()[2 * rank + 1]), -static_cast<float>(rank));

  Tensor mismatched = Tensor::zeros({p + 1, 2}, DType::BF16);
  EXPECT_THROW(world.all_gather(piece, mismatched), Error);
}

TEST(Calls, BadArgumentsFailBeforeAnyMessage) {
  Communicator& world = flat_world();
  std::vector<int32_t> integers(4);
  EXPECT_THROW(world.all_reduce(integers.data(), integers.data(), 4, DType::I32, ReduceOp::Sum), Error);
  float value = 0.0f;
  EXPECT_THROW(world.broadcast(&value, 1, DType::F32, world.size()), Error);
  EXPECT_THROW(world.send(&value, 1, DType::F32, world.rank()), Error);
  EXPECT_THROW(world.all_reduce(nullptr, &value, 1, DType::F32, ReduceOp::Sum), Error);
  // The group stays usable: nothing was sent.
  float sum = 0.0f, one = 1.0f;
  world.all_reduce(&one, &sum, 1, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(sum, static_cast<float>(world.size()));
}

}  // namespace
}  // namespace strata::comm::testing
