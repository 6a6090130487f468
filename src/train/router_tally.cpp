#include "train/router_tally.h"

#include <algorithm>
#include <numeric>

namespace strata {

namespace {

std::vector<double> host_values(const Tensor& tensor) {
  const Tensor host = tensor.to_host().to(DType::F64);
  const double* data = host.data<double>();
  return {data, data + host.numel()};
}

double mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

}  // namespace

RouterTally::RouterTally(const ModelGraph& model, bool routed) : routed_(routed), router_(model.router) {
  if (!active()) return;
  const int64_t experts = model.graph.value(router_.expert_tokens).meta.shape.at(0);
  expert_tokens_.assign(static_cast<size_t>(experts) + 1, 0.0);  // every rank sums as many, micro-batches or not
}

std::vector<int> RouterTally::values() const {
  if (!active()) return {};
  return {router_.balance, router_.z, router_.expert_tokens, router_.expert_kept};
}

void RouterTally::add(const CompiledGraph& graph, int slot) {
  if (!active()) return;
  aux_.push_back(graph.tensor(slot, router_.balance).to_host().item());
  z_.push_back(graph.tensor(slot, router_.z).to_host().item());
  const std::vector<double> routed = host_values(graph.tensor(slot, router_.expert_tokens));
  const std::vector<double> kept = host_values(graph.tensor(slot, router_.expert_kept));
  for (size_t e = 0; e < routed.size(); ++e) {
    expert_tokens_[e] += routed[e];
    expert_tokens_.back() += routed[e] - kept[e];
  }
}

RouterMetrics RouterTally::tallied(DataParallel& parallel, int64_t micro_batches) {
  RouterMetrics metrics;
  // In the micro-batches' global order, as the loss: the same bits for any number of ranks.
  metrics.aux_loss = mean(parallel.gather(aux_, micro_batches));
  metrics.z_loss = mean(parallel.gather(z_, micro_batches));
  // Counts, exact in f64 whatever the order of the sum.
  const std::vector<double> totals = parallel.sum(expert_tokens_);
  const std::vector<double> per_expert(totals.begin(), totals.end() - 1);
  metrics.expert_tokens_min = *std::min_element(per_expert.begin(), per_expert.end());
  metrics.expert_tokens_max = *std::max_element(per_expert.begin(), per_expert.end());
  metrics.expert_tokens_mean = mean(per_expert);
  metrics.dropped = static_cast<int64_t>(totals.back());
  aux_.clear();
  z_.clear();
  std::fill(expert_tokens_.begin(), expert_tokens_.end(), 0.0);
  return metrics;
}

std::optional<RouterMetrics> RouterTally::finish(DataParallel& parallel, int64_t micro_batches,
                                                 const FromLossRanks& from_loss_ranks) {
  if (!routed_) return std::nullopt;
  RouterMetrics metrics;
  if (active()) metrics = tallied(parallel, micro_batches);
  const std::vector<double> figures = from_loss_ranks(
      {metrics.aux_loss, metrics.z_loss, metrics.expert_tokens_min, metrics.expert_tokens_max,
       metrics.expert_tokens_mean, static_cast<double>(metrics.dropped)});
  return RouterMetrics{figures[0], figures[1], figures[2], figures[3], figures[4], static_cast<int64_t>(figures[5])};
}

}  // namespace strata
