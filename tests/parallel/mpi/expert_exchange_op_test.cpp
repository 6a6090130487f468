// moe_dispatch_exchange and moe_return_exchange as ops on real ranks, checked against the layout
// written out here from their definition: rank q sends sent(q, e) rows of each expert e (its xs
// grouped by expert, capacity rows unused at the end) to the rank d holding e, which keeps them
// grouped by local expert, then by source rank, then in the order sent, the rest zero. Each row's
// values name (source rank, expert, index), so the received buffer, the rows returned and the
// gradients (the adjoints of z_d = c_d · exchange(x)_d, scaled where the rows land) are compared
// bit for bit. The counts are uneven and rank-dependent: the last expert receives nothing, every
// rank sends nothing to the next rank, and some experts get nothing from some ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "backends/backends.h"
#include "comm/communicator.h"
#include "graph/autodiff.h"
#include "graph/executor.h"
#include "parallel/device_mesh.h"
#include "parallel/group_collectives.h"

namespace strata {
namespace {

constexpr int64_t kLocalExperts = 2, kChannels = 4, kSpareRows = 2;

// Where every row goes for P ranks, from the definition (not the kernel's code).
struct Routing {
  int64_t ranks = 1, experts = kLocalExperts;

  explicit Routing(int64_t p) : ranks(p), experts(p * kLocalExperts) {}

  int64_t holder(int64_t expert) const { return expert / kLocalExperts; }
  int64_t sent(int64_t rank, int64_t expert) const {
    if (expert == experts - 1 || holder(expert) == (rank + 1) % ranks) return 0;
    return (3 * rank + 5 * expert) % 4;
  }
  int64_t total_sent(int64_t rank) const { return first_row(rank, experts); }
  // Every rank's xs has room for the most any rank sends, and two unused rows more.
  int64_t rows() const {
    int64_t most = 0;
    for (int64_t q = 0; q < ranks; ++q) most = std::max(most, total_sent(q));
    return most + kSpareRows;
  }
  // Row i of expert e in rank q's xs.
  int64_t first_row(int64_t rank, int64_t expert) const {
    int64_t row = 0;
    for (int64_t e = 0; e < expert; ++e) row += sent(rank, e);
    return row;
  }
  // The same row in its holder's xe: after the holder's lower local experts, then lower source ranks.
  int64_t position(int64_t rank, int64_t expert, int64_t index) const {
    int64_t row = index;
    for (int64_t e = holder(expert) * kLocalExperts; e < expert; ++e) {
      for (int64_t q = 0; q < ranks; ++q) row += sent(q, e);
    }
    for (int64_t q = 0; q < rank; ++q) row += sent(q, expert);
    return row;
  }
  // Calls visit(source rank, expert, index) for every row that travels.
  void for_each_row(const std::function<void(int64_t, int64_t, int64_t)>& visit) const {
    for (int64_t q = 0; q < ranks; ++q) {
      for (int64_t e = 0; e < experts; ++e) {
        for (int64_t i = 0; i < sent(q, e); ++i) visit(q, e, i);
      }
    }
  }
};

// [rows, kChannels] in `dtype`, zero but where `fill` writes (in f64).
Tensor rows_of(int64_t rows, DType dtype, const std::function<void(double*)>& fill) {
  Tensor values = Tensor::zeros({rows, kChannels}, DType::F64);
  fill(values.data<double>());
  return values.to(dtype);
}

void set_row(double* data, int64_t row, const std::function<double(int64_t)>& value) {
  for (int64_t w = 0; w < kChannels; ++w) data[row * kChannels + w] = value(w);
}

// Small integers (and quarters) that bf16 holds exactly, naming where they come from.
double token_value(int64_t rank, int64_t expert, int64_t index, int64_t w) {
  const double named[] = {static_cast<double>(rank + 1), static_cast<double>(expert + 1),
                          static_cast<double>(index + 1), 0.25};
  return named[w];
}
double buffer_value(int64_t rank, int64_t row, int64_t w) {  // a row of a [P R, C] or [R, C] buffer
  return w == 0 ? static_cast<double>(rank + 1) : w == 1 ? static_cast<double>(row + 1) : 0.5 * static_cast<double>(w);
}
double scale_of(int64_t rank) { return static_cast<double>(rank + 1); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

Tensor int_tensor(const Shape& shape, const std::function<int32_t(int64_t)>& value) {
  Tensor values = Tensor::empty(shape, DType::I32);
  for (int64_t i = 0; i < values.numel(); ++i) values.data<int32_t>()[i] = value(i);
  return values;
}

// Rank r's xs: its rows grouped by expert, then unused rows holding values that must not travel.
Tensor xs_of(const Routing& routing, int64_t r, DType dtype) {
  return rows_of(routing.rows(), dtype, [&](double* data) {
    for (int64_t row = routing.total_sent(r); row < routing.rows(); ++row) {
      set_row(data, row, [](int64_t) { return 99.0; });
    }
    for (int64_t expert = 0; expert < routing.experts; ++expert) {
      for (int64_t i = 0; i < routing.sent(r, expert); ++i) {
        set_row(data, routing.first_row(r, expert) + i, [&](int64_t w) { return token_value(r, expert, i, w); });
      }
    }
  });
}

struct ExchangeGraph {
  Graph g;
  int xs = -1, group_sizes = -1, ye = -1;  // inputs
  int xe = -1, local_sizes = -1, received = -1, round_trip = -1, ys = -1;
  Gradients grads;
};

// xs -> dispatch -> (xe, counts); return(xe) for the round trip; ye -> return -> ys; the
// objectives c_r · xe and c_r · ys differentiated with respect to xs and ye.
ExchangeGraph build_graph(const Routing& routing, int rank, DType dtype) {
  ExchangeGraph e;
  const Attrs over_ep{{"group", std::string("ep")}, {"ranks", routing.ranks}};
  const int64_t rows = routing.rows();
  e.xs = e.g.add_param("xs", {{rows, kChannels}, dtype});
  e.ye = e.g.add_param("ye", {{routing.ranks * rows, kChannels}, dtype});
  e.group_sizes = e.g.add_input("group_sizes", {{routing.experts}, DType::I32});
  const std::vector<int> dispatched = e.g.apply("moe_dispatch_exchange", {e.xs, e.group_sizes}, over_ep);
  e.xe = dispatched[0], e.local_sizes = dispatched[1], e.received = dispatched[2];
  e.round_trip = e.g.apply1("moe_return_exchange", {e.xe, e.group_sizes, e.received}, over_ep);
  e.ys = e.g.apply1("moe_return_exchange", {e.ye, e.group_sizes, e.received}, over_ep);
  const Attrs scaled{{"factor", scale_of(rank)}};
  e.grads = add_backward(e.g, {e.g.apply1("scale", {e.xe}, scaled), e.g.apply1("scale", {e.ys}, scaled)},
                         {e.xs, e.ye});
  return e;
}

// The dispatch's outputs on rank r: xe, its counts, and the return of xe (xs less the unused rows).
void expect_dispatch(const Routing& routing, int64_t r, const CompiledGraph& run, const ExchangeGraph& e,
                     DType dtype, const std::string& what) {
  const Tensor xe = rows_of(routing.ranks * routing.rows(), dtype, [&](double* data) {
    routing.for_each_row([&](int64_t q, int64_t expert, int64_t i) {
      if (routing.holder(expert) != r) return;
      set_row(data, routing.position(q, expert, i), [&](int64_t w) { return token_value(q, expert, i, w); });
    });
  });
  EXPECT_TRUE(same_bits(run.tensor(e.xe), xe)) << what << ": xe";
  const Tensor local_sizes = int_tensor({kLocalExperts}, [&](int64_t l) {
    int32_t rows = 0;
    for (int64_t q = 0; q < routing.ranks; ++q) rows += static_cast<int32_t>(routing.sent(q, r * kLocalExperts + l));
    return rows;
  });
  EXPECT_TRUE(same_bits(run.tensor(e.local_sizes), local_sizes)) << what << ": local_sizes";
  const Tensor received = int_tensor({routing.ranks, kLocalExperts}, [&](int64_t i) {
    return static_cast<int32_t>(routing.sent(i / kLocalExperts, r * kLocalExperts + i % kLocalExperts));
  });
  EXPECT_TRUE(same_bits(run.tensor(e.received), received)) << what << ": received";
  const Tensor sent_back = rows_of(routing.rows(), dtype, [&](double* data) {
    routing.for_each_row([&](int64_t q, int64_t expert, int64_t i) {
      if (q != r) return;
      set_row(data, routing.first_row(q, expert) + i, [&](int64_t w) { return token_value(q, expert, i, w); });
    });
  });
  EXPECT_TRUE(same_bits(run.tensor(e.round_trip), sent_back)) << what << ": the return of the dispatch";
}

// The return of ye on rank r and both gradients: the adjoint of a row permutation carries each
// row's seed back to where the row came from, times c of the rank where the objective took it.
void expect_return_and_gradients(const Routing& routing, int64_t r, const CompiledGraph& run, const ExchangeGraph& e,
                                 DType dtype, const std::string& what) {
  const auto own_rows = [&](const std::function<double(int64_t, int64_t, int64_t, int64_t)>& value) {
    return rows_of(routing.rows(), dtype, [&](double* data) {
      routing.for_each_row([&](int64_t q, int64_t expert, int64_t i) {
        if (q != r) return;
        const int64_t d = routing.holder(expert), at = routing.position(q, expert, i);
        set_row(data, routing.first_row(q, expert) + i, [&](int64_t w) { return value(d, at, i, w); });
      });
    });
  };
  const Tensor ys = own_rows([](int64_t d, int64_t at, int64_t, int64_t w) { return buffer_value(d, at, w); });
  EXPECT_TRUE(same_bits(run.tensor(e.ys), ys)) << what << ": ys";
  const Tensor dxs = own_rows([](int64_t d, int64_t at, int64_t, int64_t w) {
    return scale_of(d) * buffer_value(d, at, w);  // dz_d's row `at` of xe, times c_d
  });
  EXPECT_TRUE(same_bits(run.tensor(e.grads.of.at(e.xs)), dxs)) << what << ": dxs";
  const Tensor dye = rows_of(routing.ranks * routing.rows(), dtype, [&](double* data) {
    routing.for_each_row([&](int64_t q, int64_t expert, int64_t i) {
      if (routing.holder(expert) != r) return;
      const int64_t from = routing.first_row(q, expert) + i;  // dz_q's row of ys, times c_q
      set_row(data, routing.position(q, expert, i), [&](int64_t w) { return scale_of(q) * buffer_value(q, from, w); });
    });
  });
  EXPECT_TRUE(same_bits(run.tensor(e.grads.of.at(e.ye)), dye)) << what << ": dye";
}

TEST(ExpertExchangeOps, DispatchAndReturnMoveRowsAsDefinedAndAreEachOthersGradient) {
  comm::Communicator world = comm::Communicator::world();
  DeviceMesh mesh(world, MeshShape({{"dp", 1}, {"ep", world.size()}}));
  MeshGroupsRegistration groups(mesh);
  const Routing routing(world.size());
  const int r = world.rank();
  const int64_t rows = routing.rows();
  for (const auto& [backend, dtype] :
       {std::tuple{"ref", DType::F64}, std::tuple{"cpu", DType::F32}, std::tuple{"cpu", DType::BF16}}) {
    ExchangeGraph e = build_graph(routing, r, dtype);
    auto dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
    CompiledGraph run(e.g, *dispatcher,
                      {e.xe, e.local_sizes, e.received, e.round_trip, e.ys, e.grads.of.at(e.xs), e.grads.of.at(e.ye)});
    run.bind(e.xs, xs_of(routing, r, dtype));
    run.bind(e.group_sizes, int_tensor({routing.experts}, [&](int64_t expert) {
               return static_cast<int32_t>(routing.sent(r, expert));
             }));
    // ye and both seeds fill every row, the padding too: the exchanges must ignore what lies past the counts.
    const auto named_rows = [&](int64_t n) {
      return rows_of(n, dtype, [&](double* data) {
        for (int64_t row = 0; row < n; ++row) set_row(data, row, [&](int64_t w) { return buffer_value(r, row, w); });
      });
    };
    run.bind(e.ye, named_rows(routing.ranks * rows));
    run.bind(e.grads.seeds[0], named_rows(routing.ranks * rows));
    run.bind(e.grads.seeds[1], named_rows(rows));
    run.run();
    const std::string what = fmt::format("rank {} of {}, {} {}", r, routing.ranks, backend, dtype_name(dtype));
    expect_dispatch(routing, r, run, e, dtype, what);
    expect_return_and_gradients(routing, r, run, e, dtype, what);
  }
}

// A rank whose xe cannot hold what the others send (their xs have more rows than its own) refuses the
// rows after the exchange, naming the op, instead of writing past xe; the senders go on.
TEST(ExpertExchangeOps, DispatchRefusesMoreRowsThanXeHolds) {
  comm::Communicator world = comm::Communicator::world();
  DeviceMesh mesh(world, MeshShape({{"dp", 1}, {"ep", world.size()}}));
  MeshGroupsRegistration groups(mesh);
  const int64_t p = world.size(), r = world.rank();
  // One expert a rank; every other rank sends rank 0 all its rows, p + 1 of them, while rank 0's
  // one row of xs gives it room for p.
  const int64_t rows = r == 0 ? 1 : p + 1;
  const Tensor group_sizes = int_tensor({p}, [&](int64_t expert) { return expert == 0 && r != 0 ? rows : 0; });
  auto dispatcher = make_dispatcher("ref", FallbackPolicy::Error);
  const auto dispatch = [&] {
    dispatcher->call("moe_dispatch_exchange", {Tensor::zeros({rows, kChannels}, DType::F64), group_sizes},
                     {{"group", std::string("ep")}, {"ranks", p}});
  };
  if (r != 0) {
    EXPECT_NO_THROW(dispatch());
    return;
  }
  try {
    dispatch();
    ADD_FAILURE() << "rank 0 took " << (p - 1) * (p + 1) << " rows into an xe of " << p;
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'moe_dispatch_exchange'"), std::string::npos) << message;
    EXPECT_NE(message.find(fmt::format("{} rows, more than the {} of output 'xe'", (p - 1) * (p + 1), p)),
              std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace strata
