// cross_entropy and its backward over rows of logits, threaded over rows.
// Each row is read twice (max, then the sum of exponentials, from cache);
// the mean loss is summed in f64 in row order after the parallel pass.
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/indices.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int64_t kRowGrain = 4;

STRATA_CPU_CLONES void logsumexp_rows(const float* logits, int64_t vocab, int64_t row_begin, int64_t row_end,
                                      float* lse) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row = logits + r * vocab;
    float max_logit = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_logit)
    for (int64_t c = 0; c < vocab; ++c) max_logit = row[c] > max_logit ? row[c] : max_logit;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < vocab; ++c) sum += exp_approx(row[c] - max_logit);
    lse[r] = max_logit + std::log(sum);
  }
}

// dlogits = weight * (softmax - onehot); may overwrite the logits in place.
template <typename Index>
STRATA_CPU_CLONES void softmax_grad_rows(const float* logits, const float* lse, const Index* targets, int64_t vocab,
                                         float weight, int64_t row_begin, int64_t row_end, float* dlogits) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row = logits + r * vocab;
    float* grad = dlogits + r * vocab;
    float row_lse = lse[r];
#pragma omp simd
    for (int64_t c = 0; c < vocab; ++c) grad[c] = weight * exp_approx(row[c] - row_lse);
    grad[targets[r]] -= weight;
  }
}

void cross_entropy(const Tensors& in, const Tensors& out, const Attrs&) {
  const float* logits = in[0].data<float>();
  int64_t vocab = in[0].size(-1);
  int64_t rows = in[1].numel();
  check_indices("cross_entropy", "targets", in[1], vocab);
  if (rows == 0) fail("op 'cross_entropy': logits {} have no positions to average over", shape_str(in[0].shape()));
  float* lse = out[1].data<float>();
  parallel_chunks(rows, kRowGrain,
                  [&](int64_t begin, int64_t end) { logsumexp_rows(logits, vocab, begin, end, lse); });
  double total = 0.0;
  with_indices(in[1], [&](const auto* targets) {
    for (int64_t r = 0; r < rows; ++r) total += static_cast<double>(lse[r]) - logits[r * vocab + targets[r]];
  });
  out[0].data<float>()[0] = static_cast<float>(total / static_cast<double>(rows));
}

void cross_entropy_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const float* logits = in[1].data<float>();
  const float* lse = in[3].data<float>();
  int64_t vocab = in[1].size(-1);
  int64_t rows = in[2].numel();
  check_indices("cross_entropy_backward", "targets", in[2], vocab);
  if (rows == 0) return;
  auto weight = static_cast<float>(in[0].item() / static_cast<double>(rows));
  float* dlogits = out[0].data<float>();
  with_indices(in[2], [&](const auto* targets) {
    parallel_chunks(rows, kRowGrain, [&](int64_t begin, int64_t end) {
      softmax_grad_rows(logits, lse, targets, vocab, weight, begin, end, dlogits);
    });
  });
}

}  // namespace

void register_cross_entropy(Backend& backend) {
  backend.add_kernel("cross_entropy", DType::F32, cross_entropy);
  backend.add_kernel("cross_entropy_backward", DType::F32, cross_entropy_backward);
}

}  // namespace strata::cpu
