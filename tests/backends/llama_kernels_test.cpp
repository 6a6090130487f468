// The LLaMA kernels on cpu against ref, f32 and bf16, on shapes that are not
// multiples of the vector width (16 floats) or of the kernels' blocks (16 rows
// for the norms), and the residual-fused norms against the ops they replace.
// Tolerances (of |expected| + rms, see cpu_test_util.h):
// - rope rounds the same f32 products and sums as ref, from the same cos/sin
//   table: identical bits in f32 and bf16.
// - f32 rms_norm sums squares in f32 where ref sums in f64, and swiglu's e^x is
//   a polynomial (2e-7): measured worst errors 3.2e-7 (rms_norm's dweight) and
//   1.9e-7 (swiglu_backward); allowed 2e-6 (the layernorm tolerance).
// - bf16 outputs are rounded from f32 values that differ from ref's by far
//   less than half a bf16 ulp, so an output lands one ulp (at most 2^-7 of it)
//   apart where its value lies near a rounding boundary (measured worst: 4.7e-4
//   of |expected| + rms, rms_norm_backward's dx). rms_norm rounds twice (h,
//   then weight * h), so its y may be two ulps apart: 2^-6.
// Every comparison also runs cpu twice and requires the same bits.
#include <gtest/gtest.h>
#include <omp.h>

#include "cpu_test_util.h"
#include "rope_cases.h"

namespace strata::testing {
namespace {

constexpr double kF32Tol = 2e-6;
constexpr double kBf16Tol = 1.0 / 128;

const Attrs kEps{{"eps", 1e-5}};

Tensor narrow(const Tensor& tensor, DType dtype) { return tensor.to(dtype); }

// Odd widths (7, 37), LLaMA's 576 (SmolLM) and one past a vector multiple (4097 columns: a
// partial vector), with row counts that leave a partial block of 16.
const Shape kNormShapes[] = {{3, 7}, {2, 19, 37}, {5, 13, 576}, {17, 4097}};

TEST(CpuRmsNorm, ForwardAndBackwardMatchRef) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const Shape& shape : kNormShapes) {
      std::string what = std::string(dtype_name(dtype)) + " rms_norm " + shape_str(shape);
      Tensor x = narrow(random_f32(shape, 1, 2.0f), dtype);
      Tensor weight = narrow(random_f32({shape.back()}, 2), dtype);
      Tensor dy = narrow(random_f32(shape, 3), dtype);
      bool bf16 = dtype == DType::BF16;
      check_against_ref("rms_norm", {x, weight}, kEps, bf16 ? 2 * kBf16Tol : kF32Tol, what);
      check_against_ref("rms_norm_backward", {dy, x, weight}, kEps, bf16 ? kBf16Tol : kF32Tol, what + " backward");
    }
  }
}

TEST(CpuRmsNorm, BackwardDoesNotDependOnTheThreadCount) {
  Tensor x = random_f32({100, 77}, 4), weight = random_f32({77}, 5), dy = random_f32({100, 77}, 6);
  Tensors reference = run_on("cpu", "rms_norm_backward", {dy, x, weight}, kEps);
  int threads = omp_get_max_threads();
  for (int count : {1, 3}) {
    omp_set_num_threads(count);
    Tensors grads = run_on("cpu", "rms_norm_backward", {dy, x, weight}, kEps);
    expect_identical(grads[0], reference[0], "dx on " + std::to_string(count) + " threads");
    expect_identical(grads[1], reference[1], "dweight on " + std::to_string(count) + " threads");
  }
  omp_set_num_threads(threads);
}

TEST(CpuRope, MatchesRefBitForBit) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const RopeShape& s : kRopeShapes) {
      for (bool inverse : {false, true}) {
        std::string what = std::string(dtype_name(dtype)) + " rope D=" + std::to_string(s.head_dim) +
                           (inverse ? " inverse" : "");
        Tensor x = narrow(random_f32({s.batch, s.seq, s.heads * s.head_dim}, 7), dtype);
        Tensors inputs{x, rope_positions(s.seq, 5000)};
        Attrs attrs = llama3_rope(s.head_dim, inverse);
        Tensor cpu = check_against_ref("rope", inputs, attrs, 0, what)[0];
        // y may take over x's buffer (schema may_reuse).
        Tensor in_place = x.clone();
        dispatcher("cpu").run("rope", {in_place, inputs[1]}, {in_place}, attrs);
        expect_identical(in_place, cpu, what + " in place");
      }
    }
  }
  Attrs linear = llama3_rope(64, false);
  linear.set("scaling", std::string("linear"));
  Tensor x = random_f32({2, 9, 128}, 8);
  check_against_ref("rope", {x, rope_positions(9, 0)}, linear, 0, "linear");
}

// The cpu kernel keeps the cos/sin tables of its recent calls: a call whose
// positions, frequencies, direction or dtype differ from a kept table's must
// not use it, and more distinct calls than it keeps must still be right when
// an evicted one comes back.
TEST(CpuRope, KeptTablesServeOnlyTheirOwnPositionsAndParams) {
  struct Call {
    int64_t start;
    double theta;
    bool inverse;
    DType dtype;
  };
  const Call calls[] = {{0, 10000.0, false, DType::BF16}, {0, 10000.0, true, DType::BF16},
                        {1, 10000.0, false, DType::BF16}, {0, 500000.0, false, DType::BF16},
                        {0, 10000.0, false, DType::F32},  {3, 10000.0, true, DType::F32}};
  for (int round = 0; round < 2; ++round) {
    for (const Call& call : calls) {
      Attrs attrs = llama3_rope(64, call.inverse);
      attrs.set("theta", call.theta);
      std::string what = std::string(dtype_name(call.dtype)) + " rope from " + std::to_string(call.start) +
                         " theta " + std::to_string(call.theta) + (call.inverse ? " inverse" : "") + " round " +
                         std::to_string(round);
      Tensor x = narrow(random_f32({2, 6, 2 * 64}, 11), call.dtype);
      check_against_ref("rope", {x, rope_positions(6, call.start)}, attrs, 0, what);
    }
  }
}

TEST(CpuSwiglu, ForwardAndBackwardMatchRef) {
  // 3 * 11111 elements: a second parallel chunk and a partial vector.
  for (DType dtype : {DType::F32, DType::BF16}) {
    std::string what = std::string(dtype_name(dtype)) + " swiglu";
    double tol = dtype == DType::BF16 ? kBf16Tol : kF32Tol;
    Tensor gate = narrow(random_f32({3, 11111}, 9, 4.0f), dtype), up = narrow(random_f32({3, 11111}, 10), dtype);
    Tensor dy = narrow(random_f32({3, 11111}, 11), dtype);
    Tensor y = check_against_ref("swiglu", {gate, up}, {}, tol, what)[0];
    Tensors grads = check_against_ref("swiglu_backward", {dy, gate, up}, {}, tol, what + " backward");
    // Outputs over inputs as the schemas permit: y over gate; dgate over gate and dup over up at once.
    Tensor y_in_place = gate.clone();
    dispatcher("cpu").run("swiglu", {y_in_place, up}, {y_in_place});
    expect_identical(y_in_place, y, what + " in place");
    Tensor dgate = gate.clone(), dup = up.clone();
    dispatcher("cpu").run("swiglu_backward", {dy, dgate, dup}, {dgate, dup});
    expect_identical(dgate, grads[0], what + " dgate in place");
    expect_identical(dup, grads[1], what + " dup in place");
  }
  // Saturated e^-gate at both ends.
  Tensor extreme = Tensor::empty({4}, DType::F32);
  const float gates[] = {-120.0f, -30.0f, 30.0f, 120.0f};
  std::copy(std::begin(gates), std::end(gates), extreme.data<float>());
  Tensor ones = random_f32({4}, 12);
  check_against_ref("swiglu", {extreme, ones}, {}, kF32Tol, "extreme gates");
  check_against_ref("swiglu_backward", {ones, extreme, ones}, {}, kF32Tol, "extreme gates backward");
}

// ---- the residual-fused norms ----------------------------------------------------

Tensors unfused_add_rms_norm(const std::string& backend, const Tensor& x, const Tensor& r, const Tensor& weight) {
  Tensor widened = r.dtype() == x.dtype() ? r : run_on(backend, "cast", {r}, {{"dtype", "f32"}})[0];
  Tensor sum = run_on(backend, "add", {x, widened})[0];
  return {sum, run_on(backend, "rms_norm", {sum, weight}, kEps)[0]};
}

TEST(AddRmsNorm, MatchesAddThenRmsNorm) {
  struct Case {
    DType x, r;
    Shape r_shape;
  };
  // 3 * 23 = 69 rows: four blocks of 16 and a partial one; width 37.
  const Case cases[] = {{DType::F32, DType::F32, {3, 23, 37}},
                        {DType::F32, DType::F32, {23, 37}},   // r repeated over the leading dim
                        {DType::F32, DType::BF16, {3, 23, 37}},  // an absorbed widening cast
                        {DType::BF16, DType::BF16, {3, 23, 37}}};
  for (const Case& c : cases) {
    std::string what = std::string(dtype_name(c.x)) + " + " + std::string(dtype_name(c.r)) + " " + shape_str(c.r_shape);
    Tensor x = narrow(random_f32({3, 23, 37}, 21), c.x), r = narrow(random_f32(c.r_shape, 22, 0.5f), c.r);
    Tensor weight = narrow(random_f32({37}, 23), c.x);
    Tensors ref = run_on("ref", "add_rms_norm", {x, r, weight}, kEps);
    Tensors ref_unfused = unfused_add_rms_norm("ref", x, r, weight);
    for (size_t i = 0; i < 2; ++i) expect_identical(ref[i], ref_unfused[i], what + " ref output " + std::to_string(i));
    bool bf16 = c.x == DType::BF16;
    Tensors cpu = check_against_ref("add_rms_norm", {x, r, weight}, kEps, bf16 ? 2 * kBf16Tol : kF32Tol, what);
    Tensors cpu_unfused = unfused_add_rms_norm("cpu", x, r, weight);
    expect_identical(cpu[0], cpu_unfused[0], what + " cpu sum");
    expect_close(cpu[1], cpu_unfused[1], bf16 ? 2 * kBf16Tol : 1e-6, what + " cpu y vs unfused");
  }
}

TEST(RmsNormBackwardAdd, MatchesRmsNormBackwardThenAdd) {
  // 50 rows (three full blocks of 16 and a partial one), width 75.
  for (DType dy_type : {DType::F32, DType::BF16}) {
    std::string what = std::string("dy ") + std::string(dtype_name(dy_type));
    Tensor x = random_f32({5, 10, 75}, 61), weight = random_f32({75}, 62), dres = random_f32({5, 10, 75}, 63);
    Tensor dy = narrow(random_f32({5, 10, 75}, 64), dy_type);
    Tensors inputs{dy, x, weight, dres};
    Tensors cpu = check_against_ref("rms_norm_backward_add", inputs, kEps, kF32Tol, what);
    for (const std::string backend : {"ref", "cpu"}) {
      Tensor wide_dy = dy_type == DType::F32 ? dy : run_on(backend, "cast", {dy}, {{"dtype", "f32"}})[0];
      Tensors grads = run_on(backend, "rms_norm_backward", {wide_dy, x, weight}, kEps);
      Tensors fused = run_on(backend, "rms_norm_backward_add", inputs, kEps);
      // dx = dres + local is rounded once fused, twice unfused.
      expect_close(fused[0], run_on(backend, "add", {dres, grads[0]})[0], 1e-6, backend + " " + what + " dx");
      expect_identical(fused[1], grads[1], backend + " " + what + " dweight");
    }
  }
  // bf16 activations throughout.
  Tensor x = random_f32({2, 19, 40}, 71).to(DType::BF16), weight = random_f32({40}, 72).to(DType::BF16);
  Tensors inputs{random_f32({2, 19, 40}, 73).to(DType::BF16), x, weight, random_f32({2, 19, 40}, 74).to(DType::BF16)};
  check_against_ref("rms_norm_backward_add", inputs, kEps, kBf16Tol, "bf16");
}

}  // namespace
}  // namespace strata::testing
