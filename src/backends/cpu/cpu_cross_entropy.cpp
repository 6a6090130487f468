// cross_entropy and its backward over rows of logits (or of a vocabulary
// shard of them, ops/vocab_shard.h), threaded over rows.
// Each row is read twice (max, then the sum of exponentials, from cache);
// the mean loss is summed in f64 in row order after the parallel pass.
// bf16 logits are widened to f32 as they are read, so no f32 copy of them
// exists; lse and the loss are f32, dlogits are rounded to bf16 once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/indices.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"
#include "ops/vocab_shard.h"

namespace strata::cpu {

namespace {

constexpr int64_t kRowGrain = 4;
// The sum of exponentials runs in f32 over blocks of this many logits, the blocks' sums added in f64: one f32 sum
// over a 50k vocabulary drifted up to 6e-6 from the exact one with AVX2's 8 lanes. A row within one block sums as
// one f32 sum did.
constexpr int64_t kSumBlock = 8192;

template <typename T>
STRATA_CPU_CLONES void logsumexp_rows(const T* logits, int64_t vocab, int64_t row_begin, int64_t row_end, float* lse) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* row = logits + r * vocab;
    float max_logit = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_logit)
    for (int64_t c = 0; c < vocab; ++c) {
      float value = to_f32(row[c]);
      max_logit = value > max_logit ? value : max_logit;
    }
    double sum = 0.0;
    for (int64_t block = 0; block < vocab; block += kSumBlock) {
      const int64_t end = std::min(vocab, block + kSumBlock);
      float partial = 0.0f;
#pragma omp simd reduction(+ : partial)
      for (int64_t c = block; c < end; ++c) partial += exp_nonpositive(to_f32(row[c]) - max_logit);
      sum += partial;
    }
    lse[r] = max_logit + std::log(static_cast<float>(sum));
  }
}

// dlogits = weight * (softmax - onehot) over a shard of the vocabulary
// (targets outside it have no onehot here); may overwrite the logits in place.
// The target's entry is computed in f32 before its one rounding; the rest of
// the row a chunk at a time in f32 (convert.h's chunk_output).
template <typename T, typename Index>
STRATA_CPU_CLONES void softmax_grad_rows(const T* logits, const float* lse, const Index* targets,
                                         const VocabShard& shard, float weight, int64_t row_begin, int64_t row_end,
                                         T* dlogits) {
  const int64_t vocab = shard.rows;
  alignas(64) float buffer[kOutputChunk];
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* row = logits + r * vocab;
    T* grad = dlogits + r * vocab;
    float row_lse = lse[r];
    const bool holds_target = shard.holds(targets[r]);
    const int64_t target = targets[r] - shard.start;
    float target_grad = holds_target ? weight * (exp_approx(to_f32(row[target]) - row_lse) - 1.0f) : 0.0f;
    for (int64_t chunk = 0; chunk < vocab; chunk += kOutputChunk) {
      const int64_t count = std::min(kOutputChunk, vocab - chunk);
      float* out = chunk_output(grad + chunk, buffer);
#pragma omp simd
      for (int64_t c = 0; c < count; ++c) out[c] = weight * exp_approx(to_f32(row[chunk + c]) - row_lse);
      store_chunk(buffer, grad + chunk, count);
    }
    if (holds_target) grad[target] = from_f32<T>(target_grad);
  }
}

template <typename T>
void cross_entropy(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const T* logits = in[0].data<T>();
  const VocabShard shard = vocab_shard("cross_entropy", attrs, in[0].size(-1));
  const int64_t vocab = shard.rows;
  int64_t rows = in[1].numel();
  check_indices("cross_entropy", "targets", in[1], shard.size);
  if (rows == 0) fail("op 'cross_entropy': logits {} have no positions to average over", shape_str(in[0].shape()));
  float* lse = out[1].data<float>();
  parallel_chunks(rows, kRowGrain,
                  [&](int64_t begin, int64_t end) { logsumexp_rows(logits, vocab, begin, end, lse); });
  std::vector<float> target_logit(static_cast<size_t>(rows), 0.0f);
  with_indices(in[1], [&](const auto* targets) {
    for (int64_t r = 0; r < rows; ++r) {
      if (shard.holds(targets[r])) target_logit[r] = to_f32(logits[r * vocab + targets[r] - shard.start]);
    }
  });
  combine_vocab_shards(attrs, lse, target_logit.data(), static_cast<size_t>(rows));
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total += static_cast<double>(lse[r]) - static_cast<double>(target_logit[r]);
  out[0].data<float>()[0] = static_cast<float>(total / static_cast<double>(rows));
}

template <typename T>
void cross_entropy_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const T* logits = in[1].data<T>();
  const float* lse = in[3].data<float>();
  const VocabShard shard = vocab_shard("cross_entropy_backward", attrs, in[1].size(-1));
  int64_t rows = in[2].numel();
  check_indices("cross_entropy_backward", "targets", in[2], shard.size);
  if (rows == 0) return;
  auto weight = static_cast<float>(in[0].item() / static_cast<double>(rows));
  T* dlogits = out[0].data<T>();
  with_indices(in[2], [&](const auto* targets) {
    parallel_chunks(rows, kRowGrain, [&](int64_t begin, int64_t end) {
      softmax_grad_rows(logits, lse, targets, shard, weight, begin, end, dlogits);
    });
  });
}

}  // namespace

void register_cross_entropy(Backend& backend) {
  backend.add_kernel("cross_entropy", DType::F32, cross_entropy<float>);
  backend.add_kernel("cross_entropy_backward", DType::F32, cross_entropy_backward<float>);
  backend.add_kernel("cross_entropy", DType::BF16, cross_entropy<bf16>);
  backend.add_kernel("cross_entropy_backward", DType::BF16, cross_entropy_backward<bf16>);
}

}  // namespace strata::cpu
