// all_gather and reduce_scatter as ops on real ranks, along the sequence axis of [batch, seq, width]
// as sequence parallelism uses them: G = all_gather(x_r) must be every rank's x in rank order;
// out_r = reduce_scatter(c_r G) is (sum of c_q) x_r; and, each being the other's gradient, the
// backward gives dx_r = (sum of c_q) dy_r — the adjoint of that linear map.
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

const Shape kShard = {2, 3, 4};  // batch, this rank's sequence positions, width

Tensor random(uint64_t stream, DType dtype) {
  Tensor values = Tensor::empty(kShard, DType::F64);
  CounterRng rng(9);
  for (int64_t i = 0; i < values.numel(); ++i) values.data<double>()[i] = rng.normal(stream, i);
  return values.to(dtype);
}

double max_difference(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(DType::F64), y = b.to(DType::F64);
  EXPECT_EQ(x.shape(), y.shape());
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) worst = std::max(worst, std::abs(x.data<double>()[i] - y.data<double>()[i]));
  return worst;
}

TEST(SequenceParallelCollectives, GatherAndReduceScatterAreEachOthersAdjoint) {
  comm::Communicator world = comm::Communicator::world();
  DeviceMesh mesh(world, MeshShape({{"dp", 1}, {"tp", world.size()}}));
  register_mesh_groups(mesh);
  const int p = world.size(), r = world.rank();
  const double total_scale = p * (p + 1) / 2.0;  // sum of c_q = q + 1
  for (const auto& [backend, dtype, tolerance] :
       {std::tuple{"ref", DType::F64, 1e-13}, std::tuple{"cpu", DType::F32, 1e-5}}) {
    const Attrs along_seq{{"group", std::string("tp")}, {"ranks", int64_t{p}}, {"dim", int64_t{1}}};
    Graph g;
    int x = g.add_param("x", {kShard, dtype});
    int gathered = g.apply1("all_gather", {x}, along_seq);
    int scaled = g.apply1("scale", {gathered}, {{"factor", static_cast<double>(r + 1)}});
    int out = g.apply1("reduce_scatter", {scaled}, along_seq);
    Gradients grads = add_backward(g, out, {x});
    auto dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
    CompiledGraph compiled(g, *dispatcher, {gathered, out, grads.of.at(x)});
    const Tensor mine = random(static_cast<uint64_t>(r), dtype), dy = random(100 + static_cast<uint64_t>(r), dtype);
    compiled.bind(x, mine);
    compiled.bind(grads.seed, dy);
    compiled.run();
    const std::string what = fmt::format("rank {} of {}, {} {}", r, p, backend, dtype_name(dtype));

    Tensor all = compiled.tensor(gathered);
    ASSERT_EQ(all.shape(), (Shape{2, 3 * p, 4})) << what;
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(max_difference(all.narrow(1, 3 * q, 3).clone(), random(static_cast<uint64_t>(q), dtype)), 0.0)
          << what << ": rank " << q << "'s block of the gather";
    }
    Tensor expected_out = mine.to(DType::F64), expected_dx = dy.to(DType::F64);
    for (int64_t i = 0; i < expected_out.numel(); ++i) {
      expected_out.data<double>()[i] *= total_scale;
      expected_dx.data<double>()[i] *= total_scale;
    }
    EXPECT_LE(max_difference(compiled.tensor(out), expected_out), tolerance * total_scale) << what << ": out";
    EXPECT_LE(max_difference(compiled.tensor(grads.of.at(x)), expected_dx), tolerance * total_scale) << what << ": dx";
  }
  unregister_mesh_groups();
}

}  // namespace
}  // namespace strata
