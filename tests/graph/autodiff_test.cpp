// Gradients of whole graphs against central finite differences, in f64 on the
// reference backend.
#include "graph/autodiff.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backends/backends.h"
#include "core/rng.h"
#include "graph/executor.h"
#include "model/model_graph.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

Tensor random_f64(const Shape& shape, uint64_t stream, double scale) {
  Tensor tensor = Tensor::empty(shape, DType::F64);
  CounterRng rng(7);
  for (int64_t i = 0; i < tensor.numel(); ++i) tensor.data<double>()[i] = scale * rng.normal(stream, i);
  return tensor;
}

Tensor random_ids(const Shape& shape, int64_t vocab, uint64_t stream) {
  Tensor tensor = Tensor::empty(shape, DType::I32);
  CounterRng rng(11);
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    tensor.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform(stream, i) * vocab) % static_cast<int32_t>(vocab);
  }
  return tensor;
}

TEST(Autodiff, TiedGpt2GradientsMatchFiniteDifferences) {
  ModelConfig config = testing::gpt2_config(2, 2, 8, 11, 5);
  const int64_t batch = 2, seq = 5;
  ModelGraph model = build_model_graph(config, batch, seq, /*training=*/true, DType::F64);
  auto dispatcher = make_dispatcher("ref", FallbackPolicy::Error);
  std::set<int> kept{model.loss};
  for (const auto& [param, grad] : model.grads.of) kept.insert(grad);
  CompiledGraph compiled(model.graph, *dispatcher, kept);

  std::vector<Tensor> params;
  std::vector<ParamSpec> specs = model_param_specs(config);
  for (size_t i = 0; i < specs.size(); ++i) {
    // Perturb norms and biases away from 1/0 so their gradients are generic.
    double scale = specs[i].init == Init::Normal ? 0.3 : 0.2;
    Tensor value = random_f64(specs[i].shape, 100 + i, scale);
    if (specs[i].init == Init::Ones) {
      for (int64_t j = 0; j < value.numel(); ++j) value.data<double>()[j] += 1.0;
    }
    params.push_back(value);
    compiled.bind(model.params[i], value);
  }
  Tensor tokens = random_ids({batch, seq}, config.vocab_size, 1);
  Tensor targets = random_ids({batch, seq}, config.vocab_size, 2);
  Tensor seed = Tensor::empty({}, DType::F64);
  seed.data<double>()[0] = 1.0;
  compiled.bind(model.tokens, tokens);
  compiled.bind(model.targets, targets);
  compiled.bind(model.positions, position_ids(seq));
  compiled.bind(model.grads.seed, seed);

  auto loss_now = [&] {
    compiled.run();
    return compiled.tensor(model.loss).item();
  };
  loss_now();
  std::vector<Tensor> grads;
  for (int param : model.params) grads.push_back(compiled.tensor(model.grads.of.at(param)).clone());

  const double h = 1e-5;
  for (size_t i = 0; i < params.size(); ++i) {
    // Directional derivative along a random direction checks every element at once.
    Tensor direction = random_f64(params[i].shape(), 500 + i, 1.0);
    double analytic = 0;
    for (int64_t j = 0; j < direction.numel(); ++j) {
      analytic += grads[i].data<double>()[j] * direction.data<double>()[j];
    }
    Tensor original = params[i].clone();
    auto shift = [&](double amount) {
      for (int64_t j = 0; j < direction.numel(); ++j) {
        params[i].data<double>()[j] = original.data<double>()[j] + amount * direction.data<double>()[j];
      }
    };
    shift(h);
    double plus = loss_now();
    shift(-h);
    double minus = loss_now();
    params[i].copy_from(original);
    double numeric = (plus - minus) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 1e-7 + 1e-6 * std::abs(numeric)) << specs[i].name;
  }
}

TEST(Autodiff, ValueUsedTwiceSumsItsGradients) {
  Graph g;
  int x = g.add_input("x", {{3}, DType::F64});
  int y = g.apply1("add", {x, x});  // y = 2x
  int z = g.apply1("scale", {y}, {{"factor", 3.0}});
  Gradients grads = add_backward(g, z, {x});
  auto dispatcher = make_dispatcher("ref", FallbackPolicy::Error);
  CompiledGraph compiled(g, *dispatcher, {grads.of.at(x)});
  Tensor input = Tensor::zeros({3}, DType::F64);
  Tensor seed = Tensor::empty({3}, DType::F64);
  for (int i = 0; i < 3; ++i) seed.data<double>()[i] = i + 1;
  compiled.bind(x, input);
  compiled.bind(grads.seed, seed);
  compiled.run();
  Tensor dx = compiled.tensor(grads.of.at(x));
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(dx.data<double>()[i], 6.0 * (i + 1));
}

TEST(Autodiff, UnreachableTargetIsAnError) {
  Graph g;
  int x = g.add_input("x", {{3}, DType::F64});
  int unused = g.add_param("unused", {{3}, DType::F64});
  int z = g.apply1("scale", {x}, {{"factor", 3.0}});
  EXPECT_THROW(add_backward(g, z, {unused}), Error);
}

}  // namespace
}  // namespace strata
