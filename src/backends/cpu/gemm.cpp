#include "backends/cpu/gemm.h"

#include <dnnl.h>

#include "core/error.h"
#include "ops/sum_order.h"

namespace strata::cpu {
namespace {

// The terms [first, first + count) of every sum, added to beta * c.
void sgemm_terms(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t first, int64_t count,
                 const float* a, const float* b, float beta, float* c) {
  const int64_t lda = trans_a ? m : k;
  const int64_t ldb = trans_b ? k : n;
  const float* a_first = trans_a ? a + first * m : a + first;
  const float* b_first = trans_b ? b + first : b + first * n;
  dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, count, 1.0f, a_first, lda,
                                    b_first, ldb, beta, c, n);
  STRATA_CHECK(status == dnnl_success, "dnnl_sgemm failed with status {} for m={} n={} k={}", static_cast<int>(status),
               m, n, count);
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float beta,
           float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: only the beta term is left
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  if (sum_order() == SumOrder::Permuted && k > 1) {  // the later terms first (ops/sum_order.h)
    const int64_t split = permuted_sum_start(k);
    sgemm_terms(trans_a, trans_b, m, n, k, split, k - split, a, b, beta, c);
    sgemm_terms(trans_a, trans_b, m, n, k, 0, split, a, b, 1.0f, c);
    return;
  }
  sgemm_terms(trans_a, trans_b, m, n, k, 0, k, a, b, beta, c);
}

}  // namespace strata::cpu
