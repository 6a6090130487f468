// add, scale, gelu(_backward), cast, adamw(_with_copy) and fused_elementwise on the opencl backend
// against ref, with the cpu tests' shapes and tolerances: add and the casts are exact; scale, gelu
// (the cpu's polynomial e^x) and adamw stay within a few f32 ulps. Outputs written over their
// inputs give the bits of fresh outputs, kernels read tensors at their offset into a buffer, and a
// fused program gives the bits of its f32 ops run one by one.
#include <gtest/gtest.h>

#include "cast_checks.h"
#include "cpu_test_util.h"
#include "ops/fused_program.h"

namespace strata::testing {
namespace {

const Device& opencl_device() { return get_backend("opencl").device(); }

// Runs `op` on opencl with output k written over input over_inputs[k]; returns the outputs on the host.
Tensors run_in_place(const std::string& op, const Tensors& inputs, const std::vector<size_t>& over_inputs,
                     const Attrs& attrs = {}) {
  Tensors on_device;
  for (const Tensor& input : inputs) on_device.push_back(input.to_device(opencl_device()).clone());
  Tensors outputs;
  for (size_t input : over_inputs) outputs.push_back(on_device[input]);
  dispatcher("opencl").run(op, on_device, outputs, attrs);
  for (Tensor& output : outputs) output = output.to_host();
  return outputs;
}

// ---- add, scale, gelu -------------------------------------------------------

TEST(OpenCLElementwise, AddMatchesRefForSameShapeAndSuffixBroadcast) {
  const Tensor a = random_f32({3, 5, 77}, 1);
  check_backend_against_ref("opencl", "add", {a, random_f32({3, 5, 77}, 2)}, {}, 0.0, "add same shape");
  check_backend_against_ref("opencl", "add", {a, random_f32({77}, 3)}, {}, 0.0, "add [77]");
  check_backend_against_ref("opencl", "add", {a, random_f32({5, 77}, 4)}, {}, 0.0, "add [5, 77]");
  check_backend_against_ref("opencl", "add", {a, random_f32({}, 5)}, {}, 0.0, "add scalar");
  check_backend_against_ref("opencl", "add", {random_f32({4, 10000}, 6), random_f32({10000}, 7)}, {}, 0.0,
                            "add large");
}

TEST(OpenCLElementwise, AddScaleAndGeluMayWriteOverTheirInputs) {
  const Tensor a = random_f32({2, 3000, 7}, 8), b = random_f32({7}, 9), same = random_f32({2, 3000, 7}, 10);
  expect_identical(run_in_place("add", {a, b}, {0})[0], run_on("opencl", "add", {a, b})[0], "add over a");
  expect_identical(run_in_place("add", {a, same}, {1})[0], run_on("opencl", "add", {a, same})[0], "add over b");
  const Attrs factor{{"factor", -0.37}};
  expect_identical(run_in_place("scale", {a}, {0}, factor)[0], run_on("opencl", "scale", {a}, factor)[0],
                   "scale over x");
  expect_identical(run_in_place("gelu", {a}, {0})[0], run_on("opencl", "gelu", {a})[0], "gelu over x");
  const Tensor dx = run_on("opencl", "gelu_backward", {same, a})[0];
  expect_identical(run_in_place("gelu_backward", {same, a}, {0})[0], dx, "gelu_backward over dy");
  expect_identical(run_in_place("gelu_backward", {same, a}, {1})[0], dx, "gelu_backward over x");
}

TEST(OpenCLElementwise, ReadsAndWritesTensorsAtTheirOffsetInABuffer) {
  const Tensor rows = random_f32({5, 333}, 11), bias = random_f32({2, 333}, 12);
  const Tensor a = rows.to_device(opencl_device()).narrow(0, 2, 3);  // starts 666 floats into its buffer
  const Tensor b = bias.to_device(opencl_device()).narrow(0, 1, 1).reshape({333});
  Tensor out = Tensor::zeros({4, 3, 333}, DType::F32, opencl_device()).narrow(0, 3, 1).reshape({3, 333});
  dispatcher("opencl").run("add", {a, b}, {out});
  const Tensor expected =
      run_on("ref", "add", {rows.narrow(0, 2, 3).clone(), bias.narrow(0, 1, 1).reshape({333}).clone()})[0];
  expect_identical(out.to_host(), expected, "add of views");
}

TEST(OpenCLElementwise, ScaleMatchesRef) {
  check_backend_against_ref("opencl", "scale", {random_f32({1, 33333}, 13)}, {{"factor", 0.125}}, 1e-6, "scale");
  check_backend_against_ref("opencl", "scale", {random_f32({7}, 14)}, {{"factor", -3.3}}, 1e-6, "scale small");
}

TEST(OpenCLElementwise, GeluAndItsBackwardMatchRef) {
  // Scale 4 reaches both tails, where tanh saturates.
  for (float scale : {1.0f, 4.0f}) {
    const Tensor x = random_f32({3, 11111}, 15, scale);
    check_backend_against_ref("opencl", "gelu", {x}, {}, 1e-6, "gelu");
    check_backend_against_ref("opencl", "gelu_backward", {random_f32({3, 11111}, 16), x}, {}, 2e-6, "gelu_backward");
  }
  check_backend_against_ref("opencl", "gelu", {random_f32({1}, 17)}, {}, 1e-6, "gelu single");
}

// ---- cast -------------------------------------------------------------------

TEST(OpenCLCast, RoundsLikeRefOnSpecialValues) { expect_casts_of_special_values_match_ref("opencl"); }

TEST(OpenCLCast, MatchesRefOnRandomValues) { expect_casts_of_random_values_match_ref("opencl", 18); }

// ---- adamw ------------------------------------------------------------------

Attrs adamw_attrs(int64_t step, double grad_scale = 1.0) {
  return {{"lr", 3e-3}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"step", step},
          {"grad_scale", grad_scale}};
}

TEST(OpenCLAdamw, MatchesRefAndMayUpdateInPlace) {
  const Shape shape{3, 7777};
  const Tensor param = random_f32(shape, 19), grad = random_f32(shape, 20, 0.1f), m = random_f32(shape, 21, 0.01f);
  Tensor v = random_f32(shape, 22, 0.01f);  // squared below: v is a running mean of g^2
  for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] *= v.data<float>()[i];
  for (int64_t step : {1, 10}) {
    const Tensors expected = check_backend_against_ref("opencl", "adamw", {param, grad, m, v}, adamw_attrs(step),
                                                       2e-6, "adamw step " + std::to_string(step));
    const Tensors in_place = run_in_place("adamw", {param, grad, m, v}, {0, 2, 3}, adamw_attrs(step));
    for (size_t i = 0; i < 3; ++i) expect_identical(in_place[i], expected[i], "adamw in place " + std::to_string(i));
  }
}

TEST(OpenCLAdamw, GradScaleGivesTheBitsOfScalingTheGradientFirst) {
  const Shape shape{5000};
  const Tensor param = random_f32(shape, 23), grad = random_f32(shape, 24, 0.1f);
  const Tensor m = random_f32(shape, 25, 0.01f), v = Tensor::zeros(shape, DType::F32);
  const double factor = 1.0 / (3.7 + 1e-6);
  const Tensors fused = run_on("opencl", "adamw", {param, grad, m, v}, adamw_attrs(2, factor));
  const Tensor scaled = run_on("opencl", "scale", {grad}, {{"factor", factor}})[0];
  const Tensors separate = run_on("opencl", "adamw", {param, scaled, m, v}, adamw_attrs(2));
  for (size_t i = 0; i < fused.size(); ++i) {
    expect_identical(fused[i], separate[i], "adamw output " + std::to_string(i));
  }
  check_backend_against_ref("opencl", "adamw", {param, grad, m, v}, adamw_attrs(2, factor), 2e-6,
                            "adamw with a grad scale");
}

TEST(OpenCLAdamw, WithCopyGivesAdamwsBitsAndTheCastOfTheUpdatedParameter) {
  const Shape shape{3, 7777};
  const Tensor param = random_f32(shape, 26), grad = random_f32(shape, 27, 0.1f).to(DType::BF16);
  const Tensor m = random_f32(shape, 28, 0.01f), v = Tensor::zeros(shape, DType::F32);
  for (DType copy : {DType::BF16, DType::F16}) {
    Attrs attrs = adamw_attrs(4, 0.5);
    const Tensors plain = check_backend_against_ref("opencl", "adamw", {param, grad, m, v}, attrs, 2e-6, "adamw");
    attrs.set("copy_dtype", std::string(dtype_name(copy)));
    // Not against ref by a tolerance: the copy's one rounding may land an ulp of the copy's dtype away.
    const Tensors with_copy = run_on("opencl", "adamw_with_copy", {param, grad, m, v}, attrs);
    ASSERT_EQ(with_copy.size(), 4u);
    ASSERT_EQ(with_copy[3].dtype(), copy);
    const Tensor cast = run_on("opencl", "cast", {with_copy[0]}, {{"dtype", std::string(dtype_name(copy))}})[0];
    expect_identical(with_copy[3], cast, "copy as " + std::string(dtype_name(copy)));
    for (size_t i = 0; i < 3; ++i) expect_identical(with_copy[i], plain[i], "adamw output " + std::to_string(i));
  }
}

TEST(OpenCLAdamw, AcceptsBf16AndF16Gradients) {
  const Shape shape{1000};
  const Tensor param = random_f32(shape, 29), m = random_f32(shape, 30, 0.01f), v = Tensor::zeros(shape, DType::F32);
  for (DType dtype : {DType::BF16, DType::F16}) {
    const Tensor grad = random_f32(shape, 31, 0.1f).to(dtype);
    check_backend_against_ref("opencl", "adamw", {param, grad, m, v}, adamw_attrs(3), 2e-6,
                              "adamw " + std::string(dtype_name(dtype)) + " grad");
  }
}

// ---- fused_elementwise --------------------------------------------------------

// A program's f32 standard ops run one by one on opencl.
Tensor run_unfused(const FusedProgram& program, const Tensors& inputs) {
  Tensors registers = inputs;
  for (const FusedInstruction& instruction : program.code) {
    Tensors operands;
    for (int operand : instruction.operands()) operands.push_back(registers[static_cast<size_t>(operand)]);
    registers.push_back(run_on("opencl", instruction.op_name(), operands, instruction.op_attrs())[0]);
  }
  return registers.back();
}

Tensor check_program(const std::string& text, const Tensors& inputs, double tol) {
  SCOPED_TRACE(text);
  return check_backend_against_ref("opencl", fused_elementwise_op(static_cast<int>(inputs.size())), inputs,
                                   {{"program", text}}, tol, "opencl vs ref")[0];
}

// 3 * 5 * 1111 = 16665 elements: not a multiple of the work-group size.
const Shape kOdd{3, 5, 1111};

TEST(OpenCLFusedElementwise, F32ChainsGiveTheBitsOfTheUnfusedOps) {
  const Tensor x = random_f32(kOdd, 32), y = random_f32(kOdd, 33), bias = random_f32({1111}, 34);
  const Tensor scalar = random_f32({}, 35);
  const std::vector<std::pair<std::string, Tensors>> programs = {
      {"add %0 %2; gelu %3", {x, y, bias}},  // bias broadcast over rows
      {"scale %0 0.125; add %2 %1", {x, y}},
      {"gelu_backward %0 %1; scale %2 -0.75", {x, y}},
      {"add %0 %1; add %3 %2; scale %4 3; gelu %5", {x, y, bias}},
      {"add %0 %1; add %4 %2; add %5 %3; gelu %6", {x, y, bias, scalar}},  // a scalar broadcast too
  };
  for (const auto& [text, inputs] : programs) {
    const Tensor fused = check_program(text, inputs, 2e-6);
    const FusedProgram program = FusedProgram::parse(text, static_cast<int>(inputs.size()));
    expect_identical(fused, run_unfused(program, inputs), text + ": fused vs unfused");
  }
}

TEST(OpenCLFusedElementwise, MixedPrecisionChainsRoundAtEachCast) {
  const Tensor x = random_f32(kOdd, 36), y = random_f32(kOdd, 37);
  const Tensor xb = x.to(DType::BF16), yb = y.to(DType::BF16), yh = y.to(DType::F16);
  check_program("cast %1 f32; add %0 %2", {y, xb}, 1e-6);                  // residual add of a bf16 branch
  check_program("cast %0 bf16; gelu_backward %2 %1", {x, yb}, 8e-3);       // bf16 registers
  check_program("cast %0 bf16; add %2 %1; cast %3 f32", {x, yb}, 8e-3);
  check_program("cast %0 f16; add %2 %1; gelu %3", {x, yh}, 8e-3);         // f16 registers and output
  check_program("gelu %0; cast %1 bf16", {x}, 8e-3);                       // bf16 output
}

TEST(OpenCLFusedElementwise, MayWriteOverItsFirstInput) {
  const Tensor x = random_f32(kOdd, 38), y = random_f32(kOdd, 39);
  const Attrs attrs{{"program", "add %0 %1; gelu %2"}};
  expect_identical(run_in_place("fused_elementwise2", {x, y}, {0}, attrs)[0],
                   run_on("opencl", "fused_elementwise2", {x, y}, attrs)[0], "fused over x0");
}

}  // namespace
}  // namespace strata::testing
