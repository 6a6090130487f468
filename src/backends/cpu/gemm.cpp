#include "backends/cpu/gemm.h"

#include <dnnl.h>

#include "core/error.h"

namespace strata::cpu {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float beta,
           float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: only the beta term is left
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  int64_t lda = trans_a ? m : k;
  int64_t ldb = trans_b ? k : n;
  dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, n);
  STRATA_CHECK(status == dnnl_success, "dnnl_sgemm failed with status {} for m={} n={} k={}", static_cast<int>(status),
               m, n, k);
}

}  // namespace strata::cpu
