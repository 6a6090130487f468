#pragma once
// Shared by the graph tests that check a whole graph's gradients (llama_block_test, moe_block_test):
// each parameter's gradient against the central difference of the loss along one random direction,
// which checks every element at once.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace strata::testing {

// params and gradients f64; loss_at(params) runs the forward; names label the failures.
inline void expect_param_gradients(const std::vector<Tensor>& params, const std::vector<Tensor>& gradients,
                                   const std::function<double(const std::vector<Tensor>&)>& loss_at,
                                   const std::vector<std::string>& names, uint64_t seed) {
  CounterRng rng(seed);
  const double h = 1e-5;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor direction = Tensor::empty(params[i].shape(), DType::F64);
    double analytic = 0;
    for (int64_t j = 0; j < direction.numel(); ++j) {
      direction.data<double>()[j] = rng.normal(100 + i, j);
      analytic += gradients[i].data<double>()[j] * direction.data<double>()[j];
    }
    auto shifted_loss = [&](double amount) {
      std::vector<Tensor> shifted = params;
      shifted[i] = params[i].clone();
      for (int64_t j = 0; j < direction.numel(); ++j) {
        shifted[i].data<double>()[j] += amount * direction.data<double>()[j];
      }
      return loss_at(shifted);
    };
    const double numeric = (shifted_loss(h) - shifted_loss(-h)) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 1e-7 + 1e-6 * std::abs(numeric)) << names[i];
  }
}

}  // namespace strata::testing
