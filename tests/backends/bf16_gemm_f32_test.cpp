// The bf16 GEMM through f32 (bf16_gemm_f32.h), which the cpu backend runs where oneDNN makes no bf16 matmul: tested
// directly, so it is checked on every CPU, against sums in f64 of the same bf16 operands (and bias).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/bf16_gemm_f32.h"
#include "backends/cpu/convert.h"

namespace strata::cpu {
namespace {

struct Product {
  int64_t m, n, k;
  bool trans_a, trans_b;
  std::vector<bf16> a, b;
};

Product random_product(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> values(0.0f, 1.0f);
  Product p{m, n, k, trans_a, trans_b, std::vector<bf16>(static_cast<size_t>(m * k)),
            std::vector<bf16>(static_cast<size_t>(k * n))};
  for (bf16& v : p.a) v = from_f32<bf16>(values(rng));
  for (bf16& v : p.b) v = from_f32<bf16>(values(rng));
  return p;
}

// Every output (of the rows checked, all by default) within f32's summation bound of the f64 sum, k u times the sum
// of |terms| (the products are exact), plus the one rounding to bf16, at most 2^-8 of the f32 sum.
void expect_rounded_match(const Product& p, const std::vector<bf16>& c, const std::vector<bf16>& bias,
                          std::vector<int64_t> rows = {}) {
  if (rows.empty()) {
    for (int64_t i = 0; i < p.m; ++i) rows.push_back(i);
  }
  for (int64_t i : rows) {
    for (int64_t j = 0; j < p.n; ++j) {
      double sum = bias.empty() ? 0.0 : to_f32(bias[static_cast<size_t>(j)]), magnitude = std::fabs(sum);
      for (int64_t d = 0; d < p.k; ++d) {
        const double term = static_cast<double>(to_f32(p.trans_a ? p.a[d * p.m + i] : p.a[i * p.k + d])) *
                            to_f32(p.trans_b ? p.b[j * p.k + d] : p.b[d * p.n + j]);
        sum += term;
        magnitude += std::fabs(term);
      }
      const double summed = static_cast<double>(p.k + 1) * 0x1p-24 * magnitude;
      const double bound = summed + 0x1p-8 * (std::fabs(sum) + summed);
      ASSERT_LE(std::fabs(to_f32(c[static_cast<size_t>(i * p.n + j)]) - sum), bound)
          << "element " << i << ", " << j << " of " << p.m << "x" << p.n << "x" << p.k << " trans " << p.trans_a
          << p.trans_b;
    }
  }
}

TEST(Bf16GemmThroughF32, MatchesF64SumsForEveryTransposeAndAcrossKBlocks) {
  unsigned seed = 1;
  // k = 2500 spans three of the widening's blocks, one of them partial.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{15, 29, 37}, {33, 17, 2500}, {1, 40, 7}, {64, 1, 1030}}) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        const Product p = random_product(m, n, k, trans_a, trans_b, seed++);
        std::vector<bf16> c(static_cast<size_t>(m * n), from_f32<bf16>(NAN));
        gemm_bf16_through_f32(trans_a, trans_b, m, n, k, p.a.data(), p.b.data(), nullptr, c.data(),
                              WideningScratch::Call);
        expect_rounded_match(p, c, {});
      }
    }
  }
}

// Grouped GEMMs run their products as tasks of one team, each widening into its thread's scratch: concurrent
// products must not share a buffer.
TEST(Bf16GemmThroughF32, ProductsRunAsTasksOfATeamKeepTheirBuffersApart) {
  std::vector<Product> products;
  for (unsigned i = 0; i < 8; ++i) products.push_back(random_product(20 + i, 24, 1100 + 7 * i, i % 2 == 1, false, 50 + i));
  std::vector<std::vector<bf16>> outputs(products.size());
  for (size_t i = 0; i < products.size(); ++i) {
    outputs[i].assign(static_cast<size_t>(products[i].m * products[i].n), from_f32<bf16>(NAN));
  }
  const auto count = static_cast<int64_t>(products.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(2)
  for (int64_t i = 0; i < count; ++i) {
    const Product& p = products[static_cast<size_t>(i)];
    gemm_bf16_through_f32(p.trans_a, p.trans_b, p.m, p.n, p.k, p.a.data(), p.b.data(), nullptr,
                          outputs[static_cast<size_t>(i)].data(), WideningScratch::Thread);
  }
  for (size_t i = 0; i < products.size(); ++i) expect_rounded_match(products[i], outputs[i], {});
}

// Wide products run in blocks of the output, 32 MiB of f32 sums and of B's widened panel at most: 1200 x 9000 with
// k 5 in blocks of 932 rows, with k 1100 (two of the widening's blocks of k, B widened again for each block of
// rows) in blocks of 1024 rows and 8192 columns; both with a bias. Every column is checked, in the rows on both
// sides of each boundary and the first and last.
TEST(Bf16GemmThroughF32, WideProductsRunInBlocksOfTheOutputWithTheBias) {
  unsigned seed = 90;
  for (int64_t k : {int64_t{5}, int64_t{1100}}) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        const Product p = random_product(1200, 9000, k, trans_a, trans_b, seed++);
        std::mt19937 rng(seed);
        std::normal_distribution<float> values(0.0f, 1.0f);
        std::vector<bf16> bias(9000);
        for (bf16& v : bias) v = from_f32<bf16>(values(rng));
        std::vector<bf16> c(1200 * 9000, from_f32<bf16>(NAN));
        gemm_bf16_through_f32(trans_a, trans_b, p.m, p.n, k, p.a.data(), p.b.data(), bias.data(), c.data(),
                              WideningScratch::Call);
        expect_rounded_match(p, c, bias, {0, 1, 931, 932, 933, 1023, 1024, 1025, 1199});
      }
    }
  }
}

}  // namespace
}  // namespace strata::cpu
