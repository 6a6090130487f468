// assemble_value against index formulas written out by hand: a fused [q | k | v] activation split
// by heads, vocabulary shards of unequal size, and partial terms summed.
#include <gtest/gtest.h>

#include "parallel/value_assembly.h"

namespace strata {
namespace {

ValueLayout split(int64_t dim, int64_t parts) {
  ValueLayout layout;
  layout.kind = ValueLayout::Kind::Split;
  layout.dim = dim;
  layout.parts = parts;
  return layout;
}

Tensor filled(const Shape& shape, const std::function<float(int64_t)>& value) {
  Tensor tensor = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < tensor.numel(); ++i) tensor.data<float>()[i] = value(i);
  return tensor;
}

// Whole [rows, 3 * width]: element (r, c) = 1000 r + c. Rank k of n holds, of each part p, the
// columns [p * width + k * width / n, p * width + (k + 1) * width / n).
TEST(ValueAssembly, FusedPartsArePutBackPartByPart) {
  const int64_t rows = 3, width = 6;
  for (int64_t ranks : {1, 2, 3}) {
    const int64_t piece = width / ranks;
    std::vector<Tensor> pieces;
    for (int64_t k = 0; k < ranks; ++k) {
      pieces.push_back(filled({rows, 3 * piece}, [&](int64_t i) {
        const int64_t r = i / (3 * piece), local = i % (3 * piece), p = local / piece, j = local % piece;
        return static_cast<float>(1000 * r + p * width + k * piece + j);
      }));
    }
    const Tensor whole = assemble_value("qkv", pieces, split(1, 3));
    ASSERT_EQ(whole.shape(), (Shape{rows, 3 * width}));
    for (int64_t i = 0; i < whole.numel(); ++i) {
      ASSERT_EQ(whole.data<float>()[i], static_cast<float>(1000 * (i / (3 * width)) + i % (3 * width))) << ranks;
    }
  }
}

TEST(ValueAssembly, UnequalShardsFollowEachOther) {
  // 7 vocabulary rows over 2 ranks: 3 and 4, rows of 2 elements valued by their index.
  const Tensor first = filled({3, 2}, [](int64_t i) { return static_cast<float>(i); });
  const Tensor second = filled({4, 2}, [](int64_t i) { return static_cast<float>(6 + i); });
  const Tensor whole = assemble_value("wte", {first, second}, split(0, 1));
  ASSERT_EQ(whole.shape(), (Shape{7, 2}));
  for (int64_t i = 0; i < 14; ++i) EXPECT_EQ(whole.data<float>()[i], static_cast<float>(i));
}

TEST(ValueAssembly, PartialTermsAreSummedAndWholeIsTheFirstRanks) {
  const Tensor a = filled({2, 2}, [](int64_t i) { return 0.5f * static_cast<float>(i); });
  const Tensor b = filled({2, 2}, [](int64_t i) { return 1.0f + static_cast<float>(i); });
  ValueLayout partial;
  partial.kind = ValueLayout::Kind::Partial;
  const Tensor sum = assemble_value("dx", {a, b}, partial);
  ASSERT_EQ(sum.dtype(), DType::F64);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(sum.data<double>()[i], 1.5 * static_cast<double>(i) + 1.0);
  const Tensor whole = assemble_value("ln", {a, a}, ValueLayout{});
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(whole.data<float>()[i], a.data<float>()[i]);
}

TEST(ValueAssembly, PiecesThatDoNotFitAreRefusedNamingTheValue) {
  const Tensor a = Tensor::zeros({2, 4}, DType::F32), b = Tensor::zeros({3, 4}, DType::F32);
  try {
    assemble_value("transformer.h.0.mlp.c_fc.forward.y", {a, b}, split(1, 1));
    FAIL() << "pieces of different rows assembled along the columns";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("transformer.h.0.mlp.c_fc.forward.y"), std::string::npos) << error.what();
  }
  EXPECT_THROW(assemble_value("qkv", {Tensor::zeros({2, 4}, DType::F32)}, split(1, 3)), Error);
}

}  // namespace
}  // namespace strata
