// all_to_all as an op on real ranks, along the token axis of [batch, tokens, width] as expert
// parallelism exchanges tokens: out_r's block i must be rank i's block r, bit for bit; and, the
// exchange being its own adjoint, the backward of z_r = c_r · all_to_all(x)_r gives
// dx_r's block j = c_j · dz_j's block r (checked against that formula, not against the op).
#include <gtest/gtest.h>

#include <cstring>

#include "backends/backends.h"
#include "comm/communicator.h"
#include "graph/autodiff.h"
#include "graph/executor.h"
#include "parallel/device_mesh.h"
#include "parallel/group_collectives.h"

namespace strata {
namespace {

constexpr int64_t kBatch = 2, kBlock = 3, kWidth = 4;

// A value naming where it comes from: rank `rank`'s element (b, block·kBlock + s, w).
double element(int rank, int64_t block, int64_t b, int64_t s, int64_t w) {
  return rank * 1000.0 + static_cast<double>(block * 100 + b * 10 + s) + static_cast<double>(w) / 8.0;
}

// Every rank's tensor of p blocks along the token axis, made by `value(block, b, s, w)`.
template <typename Value>
Tensor blocks_of(int p, DType dtype, const Value& value) {
  Tensor values = Tensor::empty({kBatch, p * kBlock, kWidth}, DType::F64);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t block = 0; block < p; ++block) {
      for (int64_t s = 0; s < kBlock; ++s) {
        for (int64_t w = 0; w < kWidth; ++w) {
          values.data<double>()[(b * p * kBlock + block * kBlock + s) * kWidth + w] = value(block, b, s, w);
        }
      }
    }
  }
  return values.to(dtype);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(AllToAllOp, ExchangesBlocksAndItsGradientIsTheReverseExchange) {
  comm::Communicator world = comm::Communicator::world();
  DeviceMesh mesh(world, MeshShape({{"dp", 1}, {"tp", world.size()}}));
  register_mesh_groups(mesh);
  const int p = world.size(), r = world.rank();
  for (const auto& [backend, dtype] :
       {std::tuple{"ref", DType::F64}, std::tuple{"cpu", DType::F32}, std::tuple{"cpu", DType::BF16}}) {
    const Attrs along_tokens{{"group", std::string("tp")}, {"ranks", int64_t{p}}, {"dim", int64_t{1}}};
    Graph g;
    const int x = g.add_param("x", {{kBatch, p * kBlock, kWidth}, dtype});
    const int exchanged = g.apply1("all_to_all", {x}, along_tokens);
    const int out = g.apply1("scale", {exchanged}, {{"factor", static_cast<double>(r + 1)}});
    Gradients grads = add_backward(g, out, {x});
    auto dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
    CompiledGraph compiled(g, *dispatcher, {exchanged, grads.of.at(x)});
    compiled.bind(x, blocks_of(p, dtype, [&](int64_t block, int64_t b, int64_t s, int64_t w) {
                    return element(r, block, b, s, w);
                  }));
    // dz_r's block j names (r, j) too, in small integers that bf16 holds exactly.
    compiled.bind(grads.seed, blocks_of(p, dtype, [&](int64_t block, int64_t b, int64_t, int64_t) {
                    return static_cast<double>(r * 8 + block * 2 + b);
                  }));
    compiled.run();
    const std::string what = fmt::format("rank {} of {}, {} {}", r, p, backend, dtype_name(dtype));
    const Tensor expected_out = blocks_of(p, dtype, [&](int64_t block, int64_t b, int64_t s, int64_t w) {
      return element(static_cast<int>(block), r, b, s, w);  // block i is rank i's block r
    });
    EXPECT_TRUE(same_bits(compiled.tensor(exchanged), expected_out)) << what << ": the exchange";
    const Tensor expected_dx = blocks_of(p, dtype, [&](int64_t block, int64_t b, int64_t, int64_t) {
      return static_cast<double>(block + 1) * static_cast<double>(block * 8 + r * 2 + b);  // c_j · dz_j's block r
    });
    EXPECT_TRUE(same_bits(compiled.tensor(grads.of.at(x)), expected_dx)) << what << ": dx";
  }
  unregister_mesh_groups();
}

}  // namespace
}  // namespace strata
