// layernorm and rms_norm, their backwards and their residual-fused forms on the opencl backend
// (opencl_norms.cpp) against ref, on the cpu tests' shapes: odd widths, partial blocks of 16 rows,
// and a width past the 256 work-items of a row. The kernels sum rows in f32 (a fixed tree) where ref
// sums in f64, as the cpu kernels do in their own order: the cpu tests' 2e-6 holds. Every comparison
// also runs the kernel twice and requires the same bits.
#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

constexpr double kF32Tol = 2e-6;
const Attrs kEps{{"eps", 1e-5}};

const Shape kNormShapes[] = {{1, 384}, {2, 33, 77}, {2048, 64}, {5, 1000}, {3, 7}, {17, 4097}};

// `tensor` on the opencl device, for runs whose outputs are given (in place).
Tensor on_device(const Tensor& tensor) { return tensor.to_device(dispatcher("opencl").backend().device()); }

TEST(OpenCLLayernorm, ForwardAndBackwardMatchRef) {
  for (const Shape& shape : kNormShapes) {
    const int64_t width = shape.back();
    const Tensor x = run_on("ref", "add", {random_f32(shape, 1, 2.0f), random_f32({width}, 2, 0.5f)})[0];
    const Tensor gamma = random_f32({width}, 3), beta = random_f32({width}, 4);
    const std::string what = "layernorm " + shape_str(shape);
    check_backend_against_ref("opencl", "layernorm", {x, gamma, beta}, kEps, kF32Tol, what);
    const Tensors forward = run_on("ref", "layernorm", {x, gamma, beta}, kEps);
    check_backend_against_ref("opencl", "layernorm_backward", {random_f32(shape, 5), x, gamma, forward[1], forward[2]},
                              {}, kF32Tol, what + " backward");
  }
}

TEST(OpenCLAddLayernorm, MatchesRefForRepeatedAndNarrowResiduals) {
  const Shape shape{3, 23, 37};
  const Tensor x = random_f32(shape, 21), gamma = random_f32({37}, 23, 0.3f), beta = random_f32({37}, 24, 0.2f);
  for (const Tensor& r : {random_f32(shape, 22, 0.5f), random_f32({23, 37}, 22, 0.5f),
                          random_f32(shape, 22, 0.5f).to(DType::BF16), random_f32(shape, 22, 0.5f).to(DType::F16)}) {
    const std::string what = "add_layernorm r " + std::string(dtype_name(r.dtype())) + " " + shape_str(r.shape());
    const Tensors fused =
        check_backend_against_ref("opencl", "add_layernorm", {x, r, gamma, beta}, kEps, kF32Tol, what);
    // sum may take over x's buffer (schema may_reuse).
    Tensor sum = on_device(x);
    Tensors outputs{sum, on_device(fused[1]), on_device(fused[2]), on_device(fused[3])};
    dispatcher("opencl").run("add_layernorm", {sum, on_device(r), on_device(gamma), on_device(beta)}, outputs, kEps);
    for (size_t i = 0; i < outputs.size(); ++i) {
      expect_identical(outputs[i].to_host(), fused[i], what + " in place, output " + std::to_string(i));
    }
  }
}

TEST(OpenCLLayernormBackwardAdd, MatchesRefForF32AndNarrowDy) {
  const Shape shape{5, 10, 75};  // 50 rows: three blocks of 16 and a partial one
  const Tensor x = random_f32(shape, 61), gamma = random_f32({75}, 62);
  const Tensors forward = run_on("ref", "layernorm", {x, gamma, random_f32({75}, 63)}, kEps);
  const Tensor dres = random_f32(shape, 64);
  for (DType dy_type : {DType::F32, DType::BF16, DType::F16}) {
    const Tensor dy = random_f32(shape, 65).to(dy_type);
    const std::string what = "layernorm_backward_add dy " + std::string(dtype_name(dy_type));
    const Tensors inputs{dy, x, gamma, forward[1], forward[2], dres};
    const Tensors fused = check_backend_against_ref("opencl", "layernorm_backward_add", inputs, {}, kF32Tol, what);
    // dx may take over dres's buffer.
    Tensor dx = on_device(dres);
    Tensors device_inputs;
    for (const Tensor& input : inputs) device_inputs.push_back(on_device(input));
    device_inputs[5] = dx;
    Tensors outputs{dx, on_device(fused[1]), on_device(fused[2])};
    dispatcher("opencl").run("layernorm_backward_add", device_inputs, outputs);
    expect_identical(dx.to_host(), fused[0], what + " in place");
  }
}

TEST(OpenCLRmsNorm, ForwardAndBackwardMatchRef) {
  for (const Shape& shape : kNormShapes) {
    const std::string what = "rms_norm " + shape_str(shape);
    const Tensor x = random_f32(shape, 1, 2.0f), weight = random_f32({shape.back()}, 2);
    check_backend_against_ref("opencl", "rms_norm", {x, weight}, kEps, kF32Tol, what);
    check_backend_against_ref("opencl", "rms_norm_backward", {random_f32(shape, 3), x, weight}, kEps, kF32Tol,
                              what + " backward");
  }
}

TEST(OpenCLAddRmsNorm, MatchesRefForRepeatedAndNarrowResiduals) {
  const Shape shape{3, 23, 37};
  const Tensor x = random_f32(shape, 21), weight = random_f32({37}, 23);
  for (const Tensor& r : {random_f32(shape, 22, 0.5f), random_f32({23, 37}, 22, 0.5f),
                          random_f32(shape, 22, 0.5f).to(DType::BF16), random_f32(shape, 22, 0.5f).to(DType::F16)}) {
    const std::string what = "add_rms_norm r " + std::string(dtype_name(r.dtype())) + " " + shape_str(r.shape());
    const Tensors fused = check_backend_against_ref("opencl", "add_rms_norm", {x, r, weight}, kEps, kF32Tol, what);
    Tensor sum = on_device(x);
    Tensor y = on_device(fused[1]);
    dispatcher("opencl").run("add_rms_norm", {sum, on_device(r), on_device(weight)}, {sum, y}, kEps);
    expect_identical(sum.to_host(), fused[0], what + " in place sum");
    expect_identical(y.to_host(), fused[1], what + " in place y");
  }
}

TEST(OpenCLRmsNormBackwardAdd, MatchesRefForF32AndNarrowDy) {
  const Shape shape{5, 10, 75};
  const Tensor x = random_f32(shape, 61), weight = random_f32({75}, 62), dres = random_f32(shape, 63);
  for (DType dy_type : {DType::F32, DType::BF16, DType::F16}) {
    const Tensor dy = random_f32(shape, 64).to(dy_type);
    const std::string what = "rms_norm_backward_add dy " + std::string(dtype_name(dy_type));
    const Tensors fused = check_backend_against_ref("opencl", "rms_norm_backward_add", {dy, x, weight, dres}, kEps,
                                                    kF32Tol, what);
    Tensor dx = on_device(dres);
    Tensor dweight = on_device(fused[1]);
    dispatcher("opencl").run("rms_norm_backward_add", {on_device(dy), on_device(x), on_device(weight), dx},
                             {dx, dweight}, kEps);
    expect_identical(dx.to_host(), fused[0], what + " in place");
  }
}

}  // namespace
}  // namespace strata::testing
