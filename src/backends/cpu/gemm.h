#pragma once
// Row-major single-precision GEMM on oneDNN's sgemm, which measured 5-15%
// faster than oneDNN's matmul primitive on Strata's shapes (and needs no
// primitive cache):
//   c[m, n] = beta * c[m, n] + sum over k of A[m, k] B[k, n]
// where A is a as stored [m, k], or a^T when trans_a (a stored [k, m]), and B
// is b as stored [k, n], or b^T when trans_b (b stored [n, k]). All three
// matrices are dense; threads come from OpenMP, results are bit-identical for
// a given thread count. Under SumOrder::Permuted (ops/sum_order.h) every sum
// adds its terms from an odd point near the middle of k first, then the rest.
#include <cstdint>

namespace strata::cpu {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float beta,
           float* c);

}  // namespace strata::cpu
