// gather_to_group as an op on real ranks, along the sequence axis of [batch, seq, width]: out must be
// every rank's x side by side in rank order, bit for bit; its gradient keeps this rank's block of dy
// (each rank's dy is already the whole gradient of what every rank runs alike), so the backward of
// z_r = c_r · gather_to_group(x)_r gives dx_r = c_r · dy_r's block r — not all_gather's sum over the
// ranks of their blocks r.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "backends/backends.h"
#include "comm/communicator.h"
#include "core/rng.h"
#include "graph/autodiff.h"
#include "graph/executor.h"
#include "parallel/device_mesh.h"
#include "parallel/group_collectives.h"

namespace strata {
namespace {

constexpr int64_t kBatch = 2, kBlock = 3, kWidth = 4;

// [kBatch, blocks · kBlock, kWidth] in `dtype`: element (b, block · kBlock + s, w) = value(block, b, s, w).
Tensor along_seq(int64_t blocks, DType dtype, const std::function<double(int64_t, int64_t, int64_t, int64_t)>& value) {
  Tensor values = Tensor::empty({kBatch, blocks * kBlock, kWidth}, DType::F64);
  double* data = values.data<double>();
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t block = 0; block < blocks; ++block) {
      for (int64_t s = 0; s < kBlock; ++s) {
        for (int64_t w = 0; w < kWidth; ++w) {
          data[(b * blocks * kBlock + block * kBlock + s) * kWidth + w] = value(block, b, s, w);
        }
      }
    }
  }
  return values.to(dtype);
}

// Normal values of stream `stream`, rounded to `dtype` first so products with small integers stay exact.
double normal(uint64_t stream, int64_t block, int64_t b, int64_t s, int64_t w, DType dtype) {
  const int64_t index = ((block * kBatch + b) * kBlock + s) * kWidth + w;
  Tensor value = Tensor::empty({1}, DType::F64);
  value.data<double>()[0] = CounterRng(5).normal(stream, static_cast<uint64_t>(index));
  return value.to(dtype).item();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(GatherToGroupOp, GathersEveryRanksBlockAndItsGradientKeepsThisRanksBlock) {
  comm::Communicator world = comm::Communicator::world();
  DeviceMesh mesh(world, MeshShape({{"dp", 1}, {"tp", world.size()}}));
  MeshGroupsRegistration groups(mesh);
  const int p = world.size(), r = world.rank();
  for (const auto& [backend, dtype] :
       {std::tuple{"ref", DType::F64}, std::tuple{"cpu", DType::F32}, std::tuple{"cpu", DType::BF16}}) {
    const Attrs along_seq_attrs{{"group", std::string("tp")}, {"ranks", int64_t{p}}, {"dim", int64_t{1}}};
    Graph g;
    const int x = g.add_param("x", {{kBatch, kBlock, kWidth}, dtype});
    const int gathered = g.apply1("gather_to_group", {x}, along_seq_attrs);
    const int out = g.apply1("scale", {gathered}, {{"factor", static_cast<double>(r + 1)}});
    Gradients grads = add_backward(g, out, {x});
    auto dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
    CompiledGraph compiled(g, *dispatcher, {gathered, grads.of.at(x)});
    // Rank q's x is stream q; its dy is stream 100 + q.
    const auto x_of = [&](int64_t q, int64_t b, int64_t s, int64_t w) {
      return normal(static_cast<uint64_t>(q), 0, b, s, w, dtype);
    };
    compiled.bind(x, along_seq(1, dtype, [&](int64_t, int64_t b, int64_t s, int64_t w) { return x_of(r, b, s, w); }));
    const auto dy = [&](int64_t block, int64_t b, int64_t s, int64_t w) {
      return normal(100 + static_cast<uint64_t>(r), block, b, s, w, dtype);
    };
    compiled.bind(grads.seed, along_seq(p, dtype, dy));
    compiled.run();
    const std::string what = fmt::format("rank {} of {}, {} {}", r, p, backend, dtype_name(dtype));
    const Tensor every_rank = along_seq(p, dtype, [&](int64_t block, int64_t b, int64_t s, int64_t w) {
      return x_of(block, b, s, w);
    });
    EXPECT_TRUE(same_bits(compiled.tensor(gathered), every_rank)) << what << ": the gather";
    const Tensor own_block = along_seq(1, dtype, [&](int64_t, int64_t b, int64_t s, int64_t w) {
      return static_cast<double>(r + 1) * dy(r, b, s, w);
    });
    EXPECT_TRUE(same_bits(compiled.tensor(grads.of.at(x)), own_block)) << what << ": dx";
  }
}

}  // namespace
}  // namespace strata
