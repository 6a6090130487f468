// adamw against the AdamW update written out here, and against
// torch.optim.AdamW's numbers for the same three steps.
#include <cmath>

#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

constexpr double kLr = 0.1, kBeta1 = 0.9, kBeta2 = 0.99, kEps = 1e-8, kDecay = 0.1;
const std::vector<double> kStart = {0.5, -1.0, 2.0, 0.0};
const std::vector<std::vector<double>> kGrads = {{0.1, -0.2, 0.3, 0.0}, {-0.4, 0.5, 0.6, 0.0}, {0.7, 0.8, -0.9, 1e-3}};

Attrs step_attrs(int64_t step, double grad_scale = 1.0) {
  return {{"lr", kLr}, {"beta1", kBeta1}, {"beta2", kBeta2}, {"eps", kEps}, {"weight_decay", kDecay}, {"step", step},
          {"grad_scale", grad_scale}};
}

struct State {
  Tensor param, m, v;
};

State start_state() {
  return {make_tensor({4}, kStart, DType::F32), Tensor::zeros({4}, DType::F32), Tensor::zeros({4}, DType::F32)};
}

// Three steps, updating the state in place (outputs alias param, m and v).
void run_steps(State& state, DType grad_type) {
  for (size_t s = 0; s < kGrads.size(); ++s) {
    Tensor grad = make_tensor({4}, kGrads[s], grad_type);
    ref_dispatcher().run("adamw", {state.param, grad, state.m, state.v}, {state.param, state.m, state.v},
                         step_attrs(static_cast<int64_t>(s + 1)));
  }
}

TEST(RefAdamW, ThreeStepsMatchTheClosedForm) {
  State state = start_state();
  run_steps(state, DType::F32);
  // Decoupled decay, moment updates, bias corrections 1 - beta^t with t from 1;
  // the state is f32 between steps, as in the kernel's outputs.
  std::vector<double> p = kStart, m(4, 0.0), v(4, 0.0);
  for (size_t s = 0; s < kGrads.size(); ++s) {
    double t = static_cast<double>(s + 1);
    for (size_t i = 0; i < 4; ++i) {
      double g = static_cast<float>(kGrads[s][i]);
      double decayed = p[i] * (1 - kLr * kDecay);
      m[i] = static_cast<float>(kBeta1 * m[i] + (1 - kBeta1) * g);
      v[i] = static_cast<float>(kBeta2 * v[i] + (1 - kBeta2) * g * g);
      double m_hat = m[i] / (1 - std::pow(kBeta1, t));
      double v_hat = v[i] / (1 - std::pow(kBeta2, t));
      p[i] = static_cast<float>(decayed - kLr * m_hat / (std::sqrt(v_hat) + kEps));
    }
  }
  expect_all_near(state.param, p, 1e-7, 1e-6, "param");
  expect_all_near(state.m, m, 1e-9, 1e-6, "m");
  expect_all_near(state.v, v, 1e-12, 1e-6, "v");
}

TEST(RefAdamW, StepsOnTheGradientTimesGradScale) {
  // Clipping's factor, applied by the op: the same update as on gradients scaled beforehand.
  State scaled_by_op = start_state(), scaled_before = start_state();
  Tensor grad = make_tensor({4}, kGrads[2], DType::F32);
  std::vector<double> quarter = kGrads[2];
  for (double& g : quarter) g *= 0.25;
  ref_dispatcher().run("adamw", {scaled_by_op.param, grad, scaled_by_op.m, scaled_by_op.v},
                       {scaled_by_op.param, scaled_by_op.m, scaled_by_op.v}, step_attrs(1, 0.25));
  Tensor quarter_grad = make_tensor({4}, quarter, DType::F32);
  ref_dispatcher().run("adamw", {scaled_before.param, quarter_grad, scaled_before.m, scaled_before.v},
                       {scaled_before.param, scaled_before.m, scaled_before.v}, step_attrs(1));
  expect_all_near(scaled_by_op.m, {0.025 * 0.7, 0.025 * 0.8, -0.025 * 0.9, 0.025 * 1e-3}, 1e-9, 1e-6, "m");
  for (const auto& [got, want] : {std::pair{scaled_by_op.param, scaled_before.param}, {scaled_by_op.v, scaled_before.v}}) {
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  }
}

TEST(RefAdamW, ThreeStepsMatchTorch) {
  State state = start_state();
  run_steps(state, DType::F32);
  // torch.optim.AdamW([p], lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1) in float64.
  expect_all_near(state.param, {0.40941976805151908, -0.9878712552494614, 1.7538071419834322, -0.063592919046926627},
                  1e-6, 1e-6, "param");
  expect_all_near(state.m, {0.042099999999999985, 0.10879999999999998, -0.011700000000000002, 9.9999999999999978e-05},
                  1e-9, 1e-6, "exp_avg");
  expect_all_near(state.v, {0.0065820100000000053, 0.0092670400000000094, 0.012546090000000011, 1e-08}, 1e-12, 1e-6,
                  "exp_avg_sq");
}

TEST(RefAdamW, SeparateOutputsEqualInPlaceUpdate) {
  State in_place = start_state();
  run_steps(in_place, DType::F32);
  State state = start_state();
  for (size_t s = 0; s < kGrads.size(); ++s) {
    Tensors next = run_ref("adamw", {state.param, make_tensor({4}, kGrads[s], DType::F32), state.m, state.v},
                           step_attrs(static_cast<int64_t>(s + 1)));
    state = {next[0], next[1], next[2]};
  }
  expect_all_near(state.param, values_of(in_place.param), 0, 0, "param");
  expect_all_near(state.m, values_of(in_place.m), 0, 0, "m");
  expect_all_near(state.v, values_of(in_place.v), 0, 0, "v");
}

TEST(RefAdamW, AcceptsGradientsOfEveryFloatType) {
  // The same gradient values held as bf16 and as f32 give the same update.
  State from_f32 = start_state();
  std::vector<double> grad = values_of(make_tensor({4}, {0.15625, -0.5, 3.0, 0.0078125}, DType::BF16));
  for (DType grad_type : {DType::F64, DType::BF16, DType::F16}) {
    Tensors expected = run_ref("adamw",
                               {from_f32.param, make_tensor({4}, grad, DType::F32), from_f32.m, from_f32.v},
                               step_attrs(1));
    Tensors got = run_ref("adamw", {from_f32.param, make_tensor({4}, grad, grad_type), from_f32.m, from_f32.v},
                          step_attrs(1));
    for (size_t i = 0; i < 3; ++i) {
      expect_all_near(got[i], values_of(expected[i]), 0, 0,
                      "output " + std::to_string(i) + " with " + std::string(dtype_name(grad_type)) + " grad");
    }
  }
}

TEST(RefAdamW, StepZeroIsAnError) {
  State state = start_state();
  try {
    run_ref("adamw", {state.param, Tensor::zeros({4}, DType::F32), state.m, state.v}, step_attrs(0));
    FAIL() << "step 0 accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("adamw"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("step"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace strata::testing
