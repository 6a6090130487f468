// The fused ops against the unfused ops they replace (on ref: bit for bit
// where the roundings are the same) and the cpu kernels against ref, on
// widths that are not a multiple of 16 and row counts that are not a
// multiple of the kernels' chunks.
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "ops/fused_program.h"

namespace strata {
namespace {

using testing::check_against_ref;
using testing::expect_close;
using testing::expect_identical;
using testing::random_f32;
using testing::run_on;

const Attrs kEps{{"eps", 1e-5}};

Tensor bf16_of(const Tensor& tensor) { return tensor.to(DType::BF16); }

struct NormInputs {
  Tensor x, r, gamma, beta;
};

NormInputs norm_inputs(const Shape& shape, const Shape& r_shape, uint64_t seed) {
  Shape channels{shape.back()};
  return {random_f32(shape, seed), random_f32(r_shape, seed + 1, 0.5f), random_f32(channels, seed + 2, 0.3f),
          random_f32(channels, seed + 3, 0.2f)};
}

// add then layernorm, on one backend.
Tensors unfused_add_layernorm(const std::string& backend, const NormInputs& in) {
  Tensor r = in.r.dtype() == in.x.dtype() ? in.r : run_on(backend, "cast", {in.r}, {{"dtype", "f32"}})[0];
  Tensor sum = run_on(backend, "add", {in.x, r})[0];
  Tensors norm = run_on(backend, "layernorm", {sum, in.gamma, in.beta}, kEps);
  return {sum, norm[0], norm[1], norm[2]};
}

TEST(AddLayerNorm, RefMatchesAddThenLayerNormBitForBit) {
  for (const Shape& r_shape : {Shape{3, 21, 37}, Shape{21, 37}}) {
    NormInputs in = norm_inputs({3, 21, 37}, r_shape, 11);
    Tensors fused = run_on("ref", "add_layernorm", {in.x, in.r, in.gamma, in.beta}, kEps);
    Tensors unfused = unfused_add_layernorm("ref", in);
    for (size_t i = 0; i < fused.size(); ++i) expect_identical(fused[i], unfused[i], "output " + std::to_string(i));
  }
}

TEST(AddLayerNorm, CpuMatchesRefAndUnfusedCpu) {
  // 3 * 23 = 69 rows: four full chunks of 16 and a partial one; width 37.
  for (const Shape& r_shape : {Shape{3, 23, 37}, Shape{23, 37}}) {
    NormInputs in = norm_inputs({3, 23, 37}, r_shape, 21);
    Tensors cpu = check_against_ref("add_layernorm", {in.x, in.r, in.gamma, in.beta}, kEps, 2e-6, "f32");
    Tensors unfused = unfused_add_layernorm("cpu", in);
    for (size_t i = 0; i < cpu.size(); ++i) expect_close(cpu[i], unfused[i], 1e-6, "vs unfused " + std::to_string(i));
  }
}

TEST(AddLayerNorm, AbsorbsAWideningCastOfTheResidual) {
  NormInputs in = norm_inputs({5, 13, 45}, {5, 13, 45}, 31);
  in.r = bf16_of(in.r);
  Tensors cpu = check_against_ref("add_layernorm", {in.x, in.r, in.gamma, in.beta}, kEps, 2e-6, "bf16 r");
  Tensors ref_unfused = unfused_add_layernorm("ref", in);
  Tensors ref_fused = run_on("ref", "add_layernorm", {in.x, in.r, in.gamma, in.beta}, kEps);
  for (size_t i = 0; i < cpu.size(); ++i) {
    expect_identical(ref_fused[i], ref_unfused[i], "ref output " + std::to_string(i));
  }
}

TEST(AddLayerNorm, Bf16Activations) {
  NormInputs in = norm_inputs({2, 19, 40}, {2, 19, 40}, 41);
  Tensors bf16_in{bf16_of(in.x), bf16_of(in.r), bf16_of(in.gamma), bf16_of(in.beta)};
  Tensors cpu = run_on("cpu", "add_layernorm", bf16_in, kEps);
  Tensors ref = run_on("ref", "add_layernorm", bf16_in, kEps);
  expect_identical(cpu[0], ref[0], "bf16 sum (one rounding of an exact f32 sum)");
  expect_close(cpu[1], ref[1], 8e-3, "bf16 y");
  for (size_t i : {size_t{2}, size_t{3}}) expect_close(cpu[i], ref[i], 2e-6, "stats " + std::to_string(i));
}

// add_rms_norm's y_dtype bf16 (the fusion pass absorbing the cast that read
// y): y is the f32 y cast to bf16 by the backend's own cast, bit for bit; the
// sum does not change (opencl writes the f32 y and casts it).
TEST(AddRmsNormWithYDtype, StoresTheCastOfTheF32YBitForBit) {
  NormInputs in = norm_inputs({3, 23, 37}, {3, 23, 37}, 61);
  Attrs narrow = kEps;
  narrow.set("y_dtype", std::string("bf16"));
  for (const Tensor& r : {in.r, bf16_of(in.r)}) {
    const Tensors inputs{in.x, r, in.gamma};
    for (const std::string backend : {"ref", "cpu", "opencl"}) {
      const std::string what = backend + " r " + std::string(dtype_name(r.dtype()));
      Tensors wide = run_on(backend, "add_rms_norm", inputs, kEps);
      Tensors fused = run_on(backend, "add_rms_norm", inputs, narrow);
      ASSERT_EQ(fused[1].dtype(), DType::BF16) << what;
      expect_identical(fused[1], run_on(backend, "cast", {wide[1]}, {{"dtype", "bf16"}})[0], what + " y");
      expect_identical(fused[0], wide[0], what + " sum");
    }
  }
}

TEST(AddRmsNormWithYDtype, RefusesAWiderYDtype) {
  NormInputs in = norm_inputs({2, 5, 8}, {2, 5, 8}, 71);
  Attrs wider = kEps;
  wider.set("y_dtype", std::string("f64"));
  try {
    run_on("ref", "add_rms_norm", {in.x, in.r, in.gamma}, wider);
    FAIL() << "f64 y for f32 x accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("attr y_dtype must be x's dtype (f32) or a narrower floating one"),
              std::string::npos)
        << error.what();
  }
}

TEST(AddLayerNorm, RejectsMismatchedInputs) {
  NormInputs in = norm_inputs({2, 4, 8}, {2, 4, 8}, 51);
  EXPECT_THROW(run_on("ref", "add_layernorm", {in.x, random_f32({4, 7}, 1), in.gamma, in.beta}, kEps), Error);
  EXPECT_THROW(run_on("ref", "add_layernorm", {bf16_of(in.x), in.r, in.gamma, in.beta}, kEps), Error);
}

struct BackwardInputs {
  Tensor dy, x, gamma, mean, rstd, dres;
};

BackwardInputs backward_inputs(const Shape& shape, uint64_t seed) {
  Tensor x = random_f32(shape, seed);
  Tensor gamma = random_f32({shape.back()}, seed + 1);
  Tensors forward = run_on("ref", "layernorm", {x, gamma, random_f32({shape.back()}, seed + 2)}, kEps);
  return {random_f32(shape, seed + 3), x, gamma, forward[1], forward[2], random_f32(shape, seed + 4)};
}

TEST(LayerNormBackwardAdd, MatchesLayerNormBackwardThenAdd) {
  // 50 rows (three full blocks of 16 and a partial one), width 75.
  BackwardInputs in = backward_inputs({5, 10, 75}, 61);
  Tensors inputs{in.dy, in.x, in.gamma, in.mean, in.rstd, in.dres};
  Tensors cpu = check_against_ref("layernorm_backward_add", inputs, {}, 2e-6, "f32");
  for (const std::string backend : {"ref", "cpu"}) {
    Tensors grads = run_on(backend, "layernorm_backward", {in.dy, in.x, in.gamma, in.mean, in.rstd});
    Tensor dx = run_on(backend, "add", {in.dres, grads[0]})[0];
    Tensors fused = run_on(backend, "layernorm_backward_add", inputs);
    expect_close(fused[0], dx, 1e-6, backend + " dx");
    expect_identical(fused[1], grads[1], backend + " dgamma");
    expect_identical(fused[2], grads[2], backend + " dbeta");
  }
}

TEST(LayerNormBackwardAdd, AbsorbsAWideningCastOfDy) {
  BackwardInputs in = backward_inputs({3, 7, 33}, 71);
  Tensor dy = bf16_of(in.dy);
  Tensors cpu = check_against_ref("layernorm_backward_add", {dy, in.x, in.gamma, in.mean, in.rstd, in.dres}, {},
                                  2e-6, "bf16 dy");
  Tensor widened = run_on("cpu", "cast", {dy}, {{"dtype", "f32"}})[0];
  Tensors unfused = run_on("cpu", "layernorm_backward_add", {widened, in.x, in.gamma, in.mean, in.rstd, in.dres});
  for (size_t i = 0; i < cpu.size(); ++i) expect_identical(cpu[i], unfused[i], "output " + std::to_string(i));
}

// A program and the standard ops it stands for, run one by one.
Tensor run_unfused(const std::string& backend, const FusedProgram& program, const Tensors& inputs) {
  Tensors registers = inputs;
  for (const FusedInstruction& instruction : program.code) {
    Tensors operands;
    for (int operand : instruction.operands()) operands.push_back(registers[static_cast<size_t>(operand)]);
    registers.push_back(run_on(backend, instruction.op_name(), operands, instruction.op_attrs())[0]);
  }
  return registers.back();
}

void check_program(const std::string& text, const Tensors& inputs, double tol) {
  SCOPED_TRACE(text);
  FusedProgram program = FusedProgram::parse(text, static_cast<int>(inputs.size()));
  EXPECT_EQ(FusedProgram::parse(program.str(), program.num_inputs).str(), program.str());
  Attrs attrs{{"program", text}};
  std::string op = fused_elementwise_op(static_cast<int>(inputs.size()));
  Tensor ref = run_on("ref", op, inputs, attrs)[0];
  expect_identical(ref, run_unfused("ref", program, inputs), "ref vs unfused ref");
  Tensor cpu = check_against_ref(op, inputs, attrs, tol, "cpu vs ref")[0];
  expect_close(cpu, run_unfused("cpu", program, inputs), 1e-6, "cpu vs unfused cpu");
}

// 3 * 5 * 1111 = 16665 elements: a second parallel chunk and a partial block.
const Shape kOdd{3, 5, 1111};

TEST(FusedElementwise, F32Chains) {
  Tensor x = random_f32(kOdd, 81), y = random_f32(kOdd, 82), bias = random_f32({1111}, 83);
  check_program("add %0 %2; gelu %3", {x, y, bias}, 2e-6);  // bias broadcast over rows
  check_program("scale %0 0.125; add %2 %1", {x, y}, 1e-6);
  check_program("gelu_backward %0 %1; scale %2 -0.75", {x, y}, 2e-6);
  check_program("add %0 %1; add %3 %2; scale %4 3; gelu %5", {x, y, bias}, 2e-6);
}

TEST(FusedElementwise, MixedPrecisionChainsRoundAtEachCast) {
  Tensor x = random_f32(kOdd, 91), y = random_f32(kOdd, 92);
  Tensor xb = bf16_of(x), yb = bf16_of(y);
  check_program("cast %0 f32; add %2 %1", {xb, y}, 1e-6);         // residual add of a bf16 branch
  check_program("gelu %0; cast %2 f32; add %3 %1", {xb, y}, 8e-3);  // bf16 gelu rounds, then widens
  check_program("cast %0 bf16; gelu_backward %2 %1", {x, yb}, 8e-3);
  check_program("add %0 %1; cast %2 f32", {xb, yb}, 8e-3);
}

TEST(FusedElementwise, RejectsBadPrograms) {
  Tensor x = random_f32({4, 8}, 1), y = random_f32({4, 8}, 2), row = random_f32({8}, 3);
  auto run = [](const Tensors& inputs, const std::string& text) {
    return run_on("ref", fused_elementwise_op(static_cast<int>(inputs.size())), inputs, {{"program", text}});
  };
  EXPECT_THROW(run({x, y}, "add %0 %5"), Error);        // register not defined yet
  EXPECT_THROW(run({x, y}, "mul %0 %1"), Error);        // unknown instruction
  EXPECT_THROW(run({x, y}, "scale %0 fast"), Error);    // factor not a number
  EXPECT_THROW(run({row, x}, "add %0 %1"), Error);      // add's own check: b must broadcast to a
  EXPECT_THROW(run({x, row}, "gelu %1; add %0 %2"), Error);  // an instruction of another shape
  EXPECT_THROW(run({x}, ""), Error);
}

}  // namespace
}  // namespace strata
