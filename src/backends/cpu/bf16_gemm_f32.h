#pragma once
// The bf16 GEMM of bf16_gemm.h where oneDNN makes no bf16 matmul (2.6 makes
// one only on CPUs with AVX-512; AVX2 machines such as many EPYC hosts have
// none): both operands widened to f32 a block of k at a time, which is exact
// (a bf16 value is an f32, the product of two is exact in f32), multiplied by
// the f32 sgemm (gemm.h) into f32 sums, each rounded once, so the contract is
// the native path's (f32 sums, one rounding); the bits can differ from it, as
// its order of summation does, and are the same for a given thread count.
#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

// Where the widened blocks and the sums live: the calling thread's call
// scratch (a product that may start its own OpenMP team), or its thread
// scratch (a product run as one task of a team, as grouped_matmul's are).
enum class WideningScratch { Call, Thread };

// c [m, n] = bf16(A B + bias) summed over k, A and B stored as in gemm.h (a [m, k] or its transpose [k, m];
// b [k, n] or its transpose [n, k]), dense; bias [n] or nullptr.
void gemm_bf16_through_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, const bf16* b,
                           const bf16* bias, bf16* c, WideningScratch scratch);

// c[row, :] = bf16(sums[row, :] + bias) for one row of n, rounded once; bias may be nullptr.
void round_row(const float* sums, const bf16* bias, bf16* c, int64_t n);

// round_row over the m rows of n of dense sums and c, split over the team.
void round_rows(const float* sums, const bf16* bias, bf16* c, int64_t m, int64_t n);

}  // namespace strata::cpu
