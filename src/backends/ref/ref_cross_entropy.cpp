#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"
#include "ops/vocab_shard.h"

namespace strata::ref {

namespace {

void cross_entropy(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  std::vector<double> logits = load(in[0]);
  std::vector<int64_t> targets = load_indices(in[1]);
  const VocabShard shard = vocab_shard("cross_entropy", attrs, in[0].size(-1));
  check_indices("cross_entropy", "targets", in[1], targets, shard.size);
  if (targets.empty()) fail("op 'cross_entropy': logits {} have no positions to average over", shape_str(in[0].shape()));
  size_t classes = static_cast<size_t>(shard.rows);
  std::vector<double> lse(targets.size()), target_logit(targets.size(), 0.0);
  for (size_t p = 0; p < targets.size(); ++p) {
    const double* row = logits.data() + p * classes;
    double max_logit = -std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < classes; ++c) max_logit = std::max(max_logit, row[c]);
    double sum = 0.0;
    for (size_t c = 0; c < classes; ++c) sum += std::exp(row[c] - max_logit);
    lse[p] = max_logit + std::log(sum);
    if (shard.holds(targets[p])) target_logit[p] = row[targets[p] - shard.start];
  }
  combine_vocab_shards(attrs, lse.data(), target_logit.data(), targets.size());
  double total = 0.0;
  for (size_t p = 0; p < targets.size(); ++p) total += lse[p] - target_logit[p];
  store(out[0], {total / static_cast<double>(targets.size())});
  store(out[1], lse);
}

void cross_entropy_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  double dloss = load(in[0])[0];
  std::vector<double> logits = load(in[1]);
  std::vector<int64_t> targets = load_indices(in[2]);
  std::vector<double> lse = load(in[3]);
  const VocabShard shard = vocab_shard("cross_entropy_backward", attrs, in[1].size(-1));
  check_indices("cross_entropy_backward", "targets", in[2], targets, shard.size);
  size_t classes = static_cast<size_t>(shard.rows);
  double weight = dloss / static_cast<double>(targets.size());
  std::vector<double> dlogits(logits.size());
  for (size_t p = 0; p < targets.size(); ++p) {
    for (size_t c = 0; c < classes; ++c) {
      size_t i = p * classes + c;
      double onehot = static_cast<int64_t>(c) + shard.start == targets[p] ? 1.0 : 0.0;
      dlogits[i] = weight * (std::exp(logits[i] - lse[p]) - onehot);
    }
  }
  store(out[0], dlogits);
}

}  // namespace

void register_cross_entropy(Backend& backend) {
  add_float_kernels(backend, "cross_entropy", cross_entropy);
  add_float_kernels(backend, "cross_entropy_backward", cross_entropy_backward);
}

}  // namespace strata::ref
