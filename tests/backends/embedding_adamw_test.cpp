// embedding, embedding_backward and adamw: cpu vs ref. The gather is exact;
// the backward sums repeated ids in f32 and adamw is a few f32 operations per
// element: measured up to 5e-7, allowed 2e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

TEST(CpuEmbedding, GatherMatchesRefForBothIndexTypes) {
  Tensor weight = random_f32({50, 33}, 1);
  for (DType index : {DType::I32, DType::I64}) {
    check_against_ref("embedding", {weight, random_indices({3, 70}, 2, 50, index)}, {}, 0.0, "embedding");
  }
  check_against_ref("embedding", {weight, random_indices({1}, 3, 50)}, {}, 0.0, "embedding one id");
}

TEST(CpuEmbedding, BackwardSumsRepeatedIdsAndZeroesUnusedRows) {
  // 1000 positions over 37 ids repeat every id many times; 500 ids leave most
  // rows unused.
  for (int64_t vocab : {37, 500}) {
    Tensor ids = random_indices({4, 250}, 4, vocab, DType::I32);
    check_against_ref("embedding_backward", {random_f32({4, 250, 24}, 5), ids}, {{"num_embeddings", vocab}}, 2e-6,
                      "embedding_backward V=" + std::to_string(vocab));
  }
}

// A gradient of 1 MiB and more writes its unused rows with streaming stores: 12007 rows of 37 channels
// (rows off every 64-byte boundary), 300 positions leaving long runs of unused rows between used ones,
// into an output holding NaNs beforehand.
TEST(CpuEmbedding, BackwardOfALargeVocabularyZeroesEveryUnusedRow) {
  const int64_t vocab = 12007;
  Tensor ids = random_indices({3, 100}, 11, vocab, DType::I64);
  ids.data<int64_t>()[0] = 0;
  ids.data<int64_t>()[1] = vocab - 1;
  const Tensor dout = random_f32({3, 100, 37}, 12);
  const Attrs attrs{{"num_embeddings", vocab}};
  Tensor dweight = Tensor::empty({vocab, 37}, DType::F32);
  std::fill_n(dweight.data<float>(), dweight.numel(), std::numeric_limits<float>::quiet_NaN());
  dispatcher("cpu").run("embedding_backward", {dout, ids}, {dweight}, attrs);
  expect_close(dweight, run_on("ref", "embedding_backward", {dout, ids}, attrs)[0], 2e-6, "embedding_backward V=12007");
}

TEST(CpuEmbedding, RejectsIdsOutsideTheTable) {
  Tensor ids = Tensor::empty({2}, DType::I32);
  ids.data<int32_t>()[0] = 1;
  ids.data<int32_t>()[1] = -1;
  EXPECT_THROW(run_on("cpu", "embedding", {random_f32({4, 3}, 6), ids}), Error);
}

Attrs adamw_attrs(int64_t step, double grad_scale = 1.0) {
  return {{"lr", 3e-3}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"step", step},
          {"grad_scale", grad_scale}};
}

TEST(CpuAdamw, MatchesRefAndMayUpdateInPlace) {
  Shape shape{3, 7777};
  Tensor param = random_f32(shape, 7), grad = random_f32(shape, 8, 0.1f);
  Tensor m = random_f32(shape, 9, 0.01f);
  Tensor v_positive = random_f32(shape, 10, 0.01f);  // squared below: v is a running mean of g^2
  float* values = v_positive.data<float>();
  for (int64_t i = 0; i < v_positive.numel(); ++i) values[i] = values[i] * values[i];
  for (int64_t step : {1, 10}) {
    Tensors expected = check_against_ref("adamw", {param, grad, m, v_positive}, adamw_attrs(step), 2e-6,
                                         "adamw step " + std::to_string(step));
    Tensor p2 = param.clone(), m2 = m.clone(), v2 = v_positive.clone();
    dispatcher("cpu").run("adamw", {p2, grad, m2, v2}, {p2, m2, v2}, adamw_attrs(step));
    expect_identical(p2, expected[0], "adamw param in place");
    expect_identical(m2, expected[1], "adamw m in place");
    expect_identical(v2, expected[2], "adamw v in place");
  }
}

TEST(CpuAdamw, GradScaleGivesTheBitsOfScalingTheGradientFirst) {
  // What clipping did before AdamW took its factor: the cpu scale op over the gradient, then the step.
  Shape shape{5000};
  Tensor param = random_f32(shape, 14), grad = random_f32(shape, 15, 0.1f);
  Tensor m = random_f32(shape, 16, 0.01f), v = Tensor::zeros(shape, DType::F32);
  const double factor = 1.0 / (3.7 + 1e-6);
  Tensors fused = run_on("cpu", "adamw", {param, grad, m, v}, adamw_attrs(2, factor));
  Tensor scaled = run_on("cpu", "scale", {grad}, {{"factor", factor}})[0];
  Tensors separate = run_on("cpu", "adamw", {param, scaled, m, v}, adamw_attrs(2));
  for (size_t i = 0; i < fused.size(); ++i) expect_identical(fused[i], separate[i], "adamw output " + std::to_string(i));
  check_against_ref("adamw", {param, grad, m, v}, adamw_attrs(2, factor), 2e-6, "adamw with a grad scale");
}

// The copy is the updated f32 parameter rounded once more, as a cast of it would be; the rest is adamw's.
TEST(CpuAdamw, WithCopyGivesAdamwsBitsAndTheCastOfTheUpdatedParameter) {
  Shape shape{3, 7777};
  Tensor param = random_f32(shape, 17), grad = random_f32(shape, 18, 0.1f).to(DType::BF16);
  Tensor m = random_f32(shape, 19, 0.01f), v = Tensor::zeros(shape, DType::F32);
  for (DType copy : {DType::BF16, DType::F16}) {
    Attrs attrs = adamw_attrs(4, 0.5);
    const Tensors plain = run_on("cpu", "adamw", {param, grad, m, v}, attrs);
    attrs.set("copy_dtype", std::string(dtype_name(copy)));
    for (const char* backend : {"cpu", "ref"}) {
      const Tensors with_copy = run_on(backend, "adamw_with_copy", {param, grad, m, v}, attrs);
      ASSERT_EQ(with_copy.size(), 4u);
      ASSERT_EQ(with_copy[3].dtype(), copy);
      const Tensor cast = run_on(backend, "cast", {with_copy[0]}, {{"dtype", std::string(dtype_name(copy))}})[0];
      expect_identical(with_copy[3], cast, std::string(backend) + " copy as " + std::string(dtype_name(copy)));
      if (std::string(backend) == "cpu") {
        for (size_t i = 0; i < 3; ++i) expect_identical(with_copy[i], plain[i], "adamw output " + std::to_string(i));
      } else {
        for (size_t i = 0; i < 3; ++i) expect_close(plain[i], with_copy[i], 2e-6, "ref output " + std::to_string(i));
      }
    }
  }
}

TEST(CpuAdamw, AcceptsBf16Gradients) {
  Shape shape{1000};
  Tensor param = random_f32(shape, 11), grad = random_f32(shape, 12, 0.1f).to(DType::BF16);
  Tensor m = random_f32(shape, 13, 0.01f), v = Tensor::zeros(shape, DType::F32);
  check_against_ref("adamw", {param, grad, m, v}, adamw_attrs(3), 2e-6, "adamw bf16 grad");
}

}  // namespace
}  // namespace strata::testing
