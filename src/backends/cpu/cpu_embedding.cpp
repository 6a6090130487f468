// embedding (row gather) and embedding_backward, over the whole vocabulary or
// a shard of it (ops/vocab_shard.h). The backward sorts positions
// by id first (a stable counting sort), so each dweight row is summed by one
// thread in position order: deterministic without atomics.
#include <cstring>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/indices.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/streamed_stores.h"
#include "ops/vocab_shard.h"

namespace strata::cpu {

namespace {

constexpr int64_t kPositionGrain = 64;
constexpr int64_t kVocabGrain = 64;

void embedding(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const float* weight = in[0].data<float>();
  const VocabShard shard = vocab_shard("embedding", attrs, in[0].size(0));
  int64_t channels = in[0].size(1);
  check_indices("embedding", "ids", in[1], shard.size);
  float* result = out[0].data<float>();
  size_t row_bytes = static_cast<size_t>(channels) * sizeof(float);
  with_indices(in[1], [&](const auto* ids) {
    parallel_chunks(in[1].numel(), kPositionGrain, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        if (shard.holds(ids[p])) {
          std::memcpy(result + p * channels, weight + (ids[p] - shard.start) * channels, row_bytes);
        } else {
          std::memset(result + p * channels, 0, row_bytes);
        }
      }
    });
  });
}

// dweight rows [row_begin, row_end): row v sums dout at positions
// order[starts[v]..starts[v+1]), in that order; rows no position reads are
// zero (`zero_rows` writes them).
template <typename ZeroRows>
STRATA_CPU_CLONES void sum_embedding_rows(const float* dout, int64_t channels, const int64_t* starts,
                                          const int64_t* order, int64_t row_begin, int64_t row_end,
                                          float* dweight, const ZeroRows& zero_rows) {
  int64_t zeros_from = row_begin;  // the run of rows no position reads, written when it ends
  for (int64_t v = row_begin; v < row_end; ++v) {
    float* row = dweight + v * channels;
    int64_t first = starts[v], last = starts[v + 1];
    if (first == last) continue;
    if (v > zeros_from) zero_rows(dweight + zeros_from * channels, (v - zeros_from) * channels);
    zeros_from = v + 1;
    const float* source = dout + order[first] * channels;
    for (int64_t c = 0; c < channels; ++c) row[c] = source[c];
    for (int64_t i = first + 1; i < last; ++i) {
      source = dout + order[i] * channels;
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) row[c] += source[c];
    }
  }
  if (row_end > zeros_from) zero_rows(dweight + zeros_from * channels, (row_end - zeros_from) * channels);
}

void embedding_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const float* dout = in[0].data<float>();
  const VocabShard shard = vocab_shard("embedding_backward", attrs, attrs.get_int("num_embeddings"));
  const int64_t vocab = shard.rows;
  int64_t channels = out[0].size(1);
  int64_t positions = in[1].numel();
  check_indices("embedding_backward", "ids", in[1], shard.size);
  int64_t* starts = call_scratch<int64_t>(0, static_cast<size_t>(vocab + 1));
  int64_t* order = call_scratch<int64_t>(1, static_cast<size_t>(positions));
  with_indices(in[1], [&](const auto* ids) {
    std::memset(starts, 0, static_cast<size_t>(vocab + 1) * sizeof(int64_t));
    // Positions whose id another shard holds are left out.
    for (int64_t p = 0; p < positions; ++p) {
      if (shard.holds(ids[p])) ++starts[ids[p] - shard.start + 1];
    }
    for (int64_t v = 0; v < vocab; ++v) starts[v + 1] += starts[v];
    // Place positions, then shift the bounds back: starts[v] ends at v's end.
    for (int64_t p = 0; p < positions; ++p) {
      if (shard.holds(ids[p])) order[starts[ids[p] - shard.start]++] = p;
    }
    for (int64_t v = vocab; v > 0; --v) starts[v] = starts[v - 1];
    starts[0] = 0;
  });
  float* dweight = out[0].data<float>();
  // Most of a vocabulary's rows are zero: a large gradient's go out with streaming stores, since it leaves
  // the cache before the optimizer (or the LM head copy's add) reads it (streamed_stores.h).
  const bool streamed = streams(out[0].nbytes());
  parallel_chunks(vocab, kVocabGrain, [&](int64_t begin, int64_t end) {
    sum_embedding_rows(dout, channels, starts, order, begin, end, dweight, [&](float* rows, int64_t count) {
      if (streamed) return zero_streamed(rows, count);
      std::memset(rows, 0, static_cast<size_t>(count) * sizeof(float));
    });
  });
}

}  // namespace

void register_embedding(Backend& backend) {
  backend.add_kernel("embedding", DType::F32, embedding);
  backend.add_kernel("embedding_backward", DType::F32, embedding_backward);
}

}  // namespace strata::cpu
