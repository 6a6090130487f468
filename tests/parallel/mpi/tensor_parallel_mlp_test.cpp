// Collectives as ops on real ranks: Megatron's tensor-parallel MLP, y = gelu(x W1) W2 with W1 split
// by columns and W2 by rows over the tp group, copy_to_group before and all_reduce after, against
// the whole MLP computed in one process from the same weights. The forward output, the input's
// gradient (copy_to_group's backward sums it over the group) and each rank's weight-shard gradients
// must match the one-process values: f64 on `ref` to rounding, f32 on `cpu` to f32 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/backends.h"
#include "comm/communicator.h"
#include "core/rng.h"
#include "graph/autodiff.h"
#include "graph/executor.h"
#include "parallel/device_mesh.h"
#include "parallel/group_collectives.h"

namespace strata {
namespace {

constexpr int64_t kRows = 6, kWidth = 8, kHidden = 12;

Tensor random(const Shape& shape, uint64_t stream, DType dtype) {
  Tensor values = Tensor::empty(shape, DType::F64);
  CounterRng rng(5);
  for (int64_t i = 0; i < values.numel(); ++i) values.data<double>()[i] = 0.5 * rng.normal(stream, i);
  return values.to(dtype);
}

struct MlpResult {
  Tensor y, dx, dw1, dw2;
};

// The MLP on `tp` ranks of group "tp" (tp = 1: no collectives), given this rank's weight shards.
MlpResult run_mlp(const std::string& backend, DType dtype, int64_t tp, const Tensor& x, const Tensor& w1,
                  const Tensor& w2, const Tensor& dy) {
  Graph g;
  const Attrs group{{"group", std::string("tp")}, {"ranks", tp}};
  const Attrs plain{{"trans_a", false}, {"trans_b", false}};
  int input = g.add_param("x", {x.shape(), dtype});
  int first = g.add_param("w1", {w1.shape(), dtype});
  int second = g.add_param("w2", {w2.shape(), dtype});
  int entered = tp > 1 ? g.apply1("copy_to_group", {input}, group) : input;
  int hidden = g.apply1("gelu", {g.apply1("matmul", {entered, first}, plain)});
  int partial = g.apply1("matmul", {hidden, second}, plain);
  int y = tp > 1 ? g.apply1("all_reduce", {partial}, group) : partial;
  Gradients grads = add_backward(g, y, {input, first, second});
  auto dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
  CompiledGraph compiled(g, *dispatcher, {y, grads.of.at(input), grads.of.at(first), grads.of.at(second)});
  compiled.bind(input, x);
  compiled.bind(first, w1);
  compiled.bind(second, w2);
  compiled.bind(grads.seed, dy);
  compiled.run();
  return {compiled.tensor(y).clone(), compiled.tensor(grads.of.at(input)).clone(),
          compiled.tensor(grads.of.at(first)).clone(), compiled.tensor(grads.of.at(second)).clone()};
}

// Largest |a - b| over the largest |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(DType::F64), y = b.to(DType::F64);
  EXPECT_EQ(x.shape(), y.shape());
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    worst = std::max(worst, std::abs(x.data<double>()[i] - y.data<double>()[i]));
    scale = std::max(scale, std::abs(y.data<double>()[i]));
  }
  return worst / scale;
}

TEST(TensorParallelMlp, MatchesTheWholeMlpInOneProcess) {
  comm::Communicator world = comm::Communicator::world();
  for (int64_t tp : {2, 3}) {
    if (world.size() % tp != 0) continue;
    DeviceMesh mesh(world, MeshShape({{"dp", static_cast<int>(world.size() / tp)}, {"tp", static_cast<int>(tp)}}));
    register_mesh_groups(mesh);
    const int64_t t = mesh.coordinates().at("tp"), shard = kHidden / tp;
    for (const auto& [backend, dtype, tolerance] :
         {std::tuple{"ref", DType::F64, 1e-13}, std::tuple{"cpu", DType::F32, 2e-6}}) {
      const Tensor x = random({kRows, kWidth}, 1, dtype), w1 = random({kWidth, kHidden}, 2, dtype),
                   w2 = random({kHidden, kWidth}, 3, dtype), dy = random({kRows, kWidth}, 4, dtype);
      MlpResult whole = run_mlp(backend, dtype, 1, x, w1, w2, dy);
      MlpResult split = run_mlp(backend, dtype, tp, x, w1.narrow(1, t * shard, shard).clone(),
                                w2.narrow(0, t * shard, shard).clone(), dy);
      const std::string what = fmt::format("tp={} rank {} {} {}", tp, world.rank(), backend, dtype_name(dtype));
      EXPECT_LE(relative_error(split.y, whole.y), tolerance) << what << ": y";
      EXPECT_LE(relative_error(split.dx, whole.dx), tolerance) << what << ": dx";
      EXPECT_LE(relative_error(split.dw1, whole.dw1.narrow(1, t * shard, shard).clone()), tolerance) << what << ": dw1";
      EXPECT_LE(relative_error(split.dw2, whole.dw2.narrow(0, t * shard, shard).clone()), tolerance) << what << ": dw2";
    }
    unregister_mesh_groups();
  }
}

// A graph built for another group size than the registered group's is refused, naming both.
TEST(TensorParallelMlp, AGraphBuiltForAnotherGroupSizeIsRefused) {
  comm::Communicator world = comm::Communicator::world();
  if (world.size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  DeviceMesh mesh(world, MeshShape({{"dp", world.size() / 2}, {"tp", 2}}));
  register_mesh_groups(mesh);
  Tensor x = random({kRows, kWidth}, 1, DType::F32);
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  try {
    Tensors out = dispatcher->call("all_reduce", {x}, {{"group", std::string("tp")}, {"ranks", int64_t{4}}});
    ADD_FAILURE() << "ran a 4-rank all_reduce on a 2-rank group";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("built for 4 ranks in group 'tp', but that group has 2"), std::string::npos)
        << error.what();
  }
  unregister_mesh_groups();
}

}  // namespace
}  // namespace strata
