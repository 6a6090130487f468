// A compiled graph on a device backend: its arena is the device's memory, inputs bound to device
// tensors, nodes queued without waiting, and --profile's per-node times read from the device's
// events. Checked on opencl against the same graph on cpu.
#include <gtest/gtest.h>

#include "backends/backends.h"
#include "graph/executor.h"

namespace strata {
namespace {

Tensor counting(const Shape& shape, float step) {
  Tensor tensor = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < tensor.numel(); ++i) tensor.data<float>()[i] = step * static_cast<float>(i % 17 - 8);
  return tensor;
}

TEST(DeviceExecutor, AGraphOnOpenCLComputesWhatItComputesOnTheHostAndTimesEveryNode) {
  Graph graph;
  const int x = graph.add_input("x", {{6, 8}, DType::F32});
  const int w = graph.add_param("w", {{8, 5}, DType::F32});
  const int product = graph.apply1("matmul", {x, w}, {{"trans_a", false}, {"trans_b", false}});
  const int out = graph.apply1("matmul", {product, w}, {{"trans_a", false}, {"trans_b", true}});
  const Tensor x_host = counting({6, 8}, 0.25f), w_host = counting({8, 5}, 0.5f);

  auto cpu = make_dispatcher("cpu", FallbackPolicy::Error);
  CompiledGraph on_host(graph, *cpu, {out});
  on_host.bind(x, x_host);
  on_host.bind(w, w_host);
  on_host.run();

  auto opencl = make_dispatcher("opencl", FallbackPolicy::Error);
  const Device& device = opencl->backend().device();
  CompiledGraph on_device(graph, *opencl, {out});
  on_device.bind(x, x_host.to_device(device));
  on_device.bind(w, w_host.to_device(device));
  on_device.enable_profiling(true);
  on_device.run();
  on_device.run();

  const Tensor result = on_device.tensor(out);
  EXPECT_EQ(&result.device(), &device) << "the arena is the device's";
  const Tensor back = result.to_host();
  const Tensor expected = on_host.tensor(out);
  for (int64_t i = 0; i < expected.numel(); ++i) {
    EXPECT_NEAR(back.data<float>()[i], expected.data<float>()[i], 1e-4) << i;  // integers and halves: exact sums
  }
  for (const NodeTiming& timing : on_device.timings()) {
    EXPECT_EQ(timing.calls, 2);
    EXPECT_GT(timing.seconds, 0.0);
  }
  EXPECT_EQ(opencl->transfer_totals().count, 0);
}

}  // namespace
}  // namespace strata
