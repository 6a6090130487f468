// rope, swiglu and swiglu_backward on the opencl backend (opencl_llama.cpp) against ref, on the
// cpu tests' shapes. rope rounds the same f32 products and sums as ref from cos and sin of the same
// f32 angles, computed in f64 on a device with cl_khr_fp64: the same bits (a device without f64
// takes f32 cos and sin, a few ulps apart). swiglu's e^x is OpenCL's (a few ulps): the cpu tests'
// 2e-6. Every comparison also runs the kernel twice and requires the same bits.
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "rope_cases.h"

namespace strata::testing {
namespace {

constexpr double kF32Tol = 2e-6;

const Device& opencl_device() { return dispatcher("opencl").backend().device(); }

TEST(OpenCLRope, MatchesRef) {
  const double tol = opencl_device().capabilities().computes(DType::F64) ? 0.0 : kF32Tol;
  for (const RopeShape& s : kRopeShapes) {
    for (bool inverse : {false, true}) {
      const std::string what = "rope D=" + std::to_string(s.head_dim) + (inverse ? " inverse" : "");
      const Tensor x = random_f32({s.batch, s.seq, s.heads * s.head_dim}, 7);
      const Tensor at = rope_positions(s.seq, 5000);
      const Attrs attrs = llama3_rope(s.head_dim, inverse);
      const Tensor y = check_backend_against_ref("opencl", "rope", {x, at}, attrs, tol, what)[0];
      // y may take over x's buffer (schema may_reuse).
      Tensor in_place = x.to_device(opencl_device());
      dispatcher("opencl").run("rope", {in_place, at.to_device(opencl_device())}, {in_place}, attrs);
      expect_identical(in_place.to_host(), y, what + " in place");
    }
  }
  Attrs linear = llama3_rope(64, false);
  linear.set("scaling", std::string("linear"));
  check_backend_against_ref("opencl", "rope", {random_f32({2, 9, 128}, 8), rope_positions(9, 0)}, linear, tol,
                            "linear");
}

TEST(OpenCLSwiglu, ForwardAndBackwardMatchRef) {
  const Tensor gate = random_f32({3, 11111}, 9, 4.0f), up = random_f32({3, 11111}, 10), dy = random_f32({3, 11111}, 11);
  const Tensor y = check_backend_against_ref("opencl", "swiglu", {gate, up}, {}, kF32Tol, "swiglu")[0];
  const Tensors grads =
      check_backend_against_ref("opencl", "swiglu_backward", {dy, gate, up}, {}, kF32Tol, "swiglu backward");
  // Outputs over inputs as the schemas permit: y over gate; dgate over gate and dup over up at once.
  Tensor y_in_place = gate.to_device(opencl_device());
  dispatcher("opencl").run("swiglu", {y_in_place, up.to_device(opencl_device())}, {y_in_place});
  expect_identical(y_in_place.to_host(), y, "swiglu in place");
  Tensor dgate = gate.to_device(opencl_device()), dup = up.to_device(opencl_device());
  dispatcher("opencl").run("swiglu_backward", {dy.to_device(opencl_device()), dgate, dup}, {dgate, dup});
  expect_identical(dgate.to_host(), grads[0], "dgate in place");
  expect_identical(dup.to_host(), grads[1], "dup in place");
  // Saturated e^-gate at both ends.
  Tensor extreme = Tensor::empty({4}, DType::F32);
  const float gates[] = {-120.0f, -30.0f, 30.0f, 120.0f};
  std::copy(std::begin(gates), std::end(gates), extreme.data<float>());
  const Tensor ones = random_f32({4}, 12);
  check_backend_against_ref("opencl", "swiglu", {extreme, ones}, {}, kF32Tol, "extreme gates");
  check_backend_against_ref("opencl", "swiglu_backward", {ones, extreme, ones}, {}, kF32Tol, "extreme gates backward");
}

}  // namespace
}  // namespace strata::testing
