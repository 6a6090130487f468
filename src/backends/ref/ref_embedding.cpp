#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"
#include "ops/vocab_shard.h"

namespace strata::ref {

namespace {

void embedding(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  std::vector<double> weight = load(in[0]);
  std::vector<int64_t> ids = load_indices(in[1]);
  const VocabShard shard = vocab_shard("embedding", attrs, in[0].size(0));
  size_t channels = static_cast<size_t>(in[0].size(1));
  check_indices("embedding", "ids", in[1], ids, shard.size);
  std::vector<double> rows(ids.size() * channels, 0.0);
  for (size_t p = 0; p < ids.size(); ++p) {
    if (!shard.holds(ids[p])) continue;
    const size_t row = static_cast<size_t>(ids[p] - shard.start);
    for (size_t c = 0; c < channels; ++c) rows[p * channels + c] = weight[row * channels + c];
  }
  store(out[0], rows);
}

void embedding_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  std::vector<double> dout = load(in[0]);
  std::vector<int64_t> ids = load_indices(in[1]);
  const VocabShard shard = vocab_shard("embedding_backward", attrs, attrs.get_int("num_embeddings"));
  size_t channels = static_cast<size_t>(out[0].size(1));
  check_indices("embedding_backward", "ids", in[1], ids, shard.size);
  std::vector<double> dweight(static_cast<size_t>(out[0].numel()), 0.0);
  for (size_t p = 0; p < ids.size(); ++p) {
    if (!shard.holds(ids[p])) continue;
    const size_t row = static_cast<size_t>(ids[p] - shard.start);
    for (size_t c = 0; c < channels; ++c) dweight[row * channels + c] += dout[p * channels + c];
  }
  store(out[0], dweight);
}

}  // namespace

void register_embedding(Backend& backend) {
  add_float_kernels(backend, "embedding", embedding);
  add_float_kernels(backend, "embedding_backward", embedding_backward);
}

}  // namespace strata::ref
