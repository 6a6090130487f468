#pragma once
// Row-major bf16 GEMM with f32 accumulation on oneDNN's matmul primitive
// (brgemm with the CPU's bf16 dot-product instructions where present):
//   c[m, n] = bf16(sum over k of A[m, k] B[k, n] + bias[n])
// with A, B as in gemm.h (a^T when trans_a, b^T when trans_b), bias optional
// (nullptr), each output rounded once. Primitives are created once per shape,
// transposes, bias and thread count and kept; results are bit-identical for a
// given thread count. Two shapes of the LM head run in fixed pieces (see
// bf16_gemm.cpp): k at least 16384 and 8 times m and n is summed in chunks of
// 4096 into f32 before the one rounding, and a^T with m at least 16384 runs in
// blocks of 2048 output rows. Where oneDNN makes no bf16 matmul (CPUs without
// AVX-512), both functions run through f32 (bf16_gemm_f32.h).
#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, const bf16* b,
               const bf16* bias, bf16* c);

// The same product (no bias) for grouped GEMMs, whose groups change size every step: the `runtime`
// dimension (m, with a not transposed; or k, with a transposed and b not) is left out of the primitive,
// so one primitive serves every group (making one costs about 2 ms; oneDNN then runs its jit gemm rather
// than brgemm, measured within 10% of it on the experts' shapes).
enum class GemmRuntimeDim { None, M, K };
void gemm_bf16_runtime(GemmRuntimeDim runtime, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const bf16* a, const bf16* b, bf16* c);

}  // namespace strata::cpu
