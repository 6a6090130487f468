// layernorm and cross_entropy, forward and backward: cpu vs ref. Both sum
// rows in f32 (layernorm over C, cross_entropy over up to 50257 logits with a
// polynomial e^x); measured worst errors are 3e-7, allowed 2e-6.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/simd.h"
#include "cpu_test_util.h"
#include "cross_entropy_cases.h"

namespace strata::testing {
namespace {

TEST(CpuLayernorm, ForwardAndBackwardMatchRef) {
  const Shape shapes[] = {{1, 384}, {2, 33, 77}, {2048, 64}, {5, 1000}};
  for (const Shape& shape : shapes) {
    int64_t width = shape.back();
    Tensor x = random_f32(shape, 1, 2.0f);
    // An offset mean, as activations often have.
    Tensor shifted = run_on("ref", "add", {x, random_f32({width}, 2, 0.5f)})[0];
    Tensor gamma = random_f32({width}, 3), beta = random_f32({width}, 4);
    Attrs attrs{{"eps", 1e-5}};
    std::string what = "layernorm " + shape_str(shape);
    check_against_ref("layernorm", {shifted, gamma, beta}, attrs, 2e-6, what);
    Tensors forward = run_on("ref", "layernorm", {shifted, gamma, beta}, attrs);
    Tensor dy = random_f32(shape, 5);
    check_against_ref("layernorm_backward", {dy, shifted, gamma, forward[1], forward[2]}, {}, 2e-6,
                      what + " backward");
  }
}

TEST(CpuCrossEntropy, ForwardAndBackwardMatchRef) {
  for (const CrossEntropyCase& c : kCrossEntropyCases) {
    Tensor logits = random_f32(c.logits, 6, c.scale);
    Shape positions(c.logits.begin(), c.logits.end() - 1);
    Tensor targets = random_indices(positions, 7, c.logits.back(), c.targets);
    std::string what = "cross_entropy " + shape_str(c.logits);
    check_against_ref("cross_entropy", {logits, targets}, {}, 2e-6, what);
    Tensors forward = run_on("ref", "cross_entropy", {logits, targets});
    Tensor dloss = Tensor::empty({}, DType::F32);
    dloss.data<float>()[0] = 0.7f;
    check_against_ref("cross_entropy_backward", {dloss, logits, targets, forward[1]}, {}, 2e-6, what + " backward");
  }
}

// The loss's sum of exponentials uses exp_nonpositive (a logit less its row's maximum is <= 0); it must give
// exp_approx's bits there, so the loss is the same whichever the kernel calls. Every 61st non-positive float
// (all exponents, the -87 cut-off's neighbours among them), zeros, infinities and NaN.
TEST(CpuCrossEntropy, ExpNonpositiveGivesExpApproxsBitsForEveryNonPositiveInput) {
  std::vector<float> inputs{-0.0f, 0.0f, -87.0f, std::nextafter(-87.0f, 0.0f), std::nextafter(-87.0f, -100.0f),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (uint64_t bits = 0x80000000u; bits <= 0xFF800000u; bits += 61) inputs.push_back(std::bit_cast<float>(uint32_t(bits)));
  int64_t differing = 0;
  for (float x : inputs) {
    const uint32_t expected = std::bit_cast<uint32_t>(cpu::exp_approx(x));
    if (std::bit_cast<uint32_t>(cpu::exp_nonpositive(x)) != expected) ++differing;
  }
  EXPECT_EQ(differing, 0) << "of " << inputs.size() << " inputs";
  EXPECT_NEAR(cpu::exp_nonpositive(-1.0f), std::exp(-1.0f), 2e-7 * std::exp(-1.0f));
}

TEST(CpuCrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  Tensor logits = random_f32({2, 10}, 8);
  Tensor targets = Tensor::empty({2}, DType::I64);
  targets.data<int64_t>()[0] = 3;
  targets.data<int64_t>()[1] = 10;
  EXPECT_THROW(run_on("cpu", "cross_entropy", {logits, targets}), Error);
}

}  // namespace
}  // namespace strata::testing
