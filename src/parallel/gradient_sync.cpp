#include "parallel/gradient_sync.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace strata {

GradientSync::GradientSync(DataParallel& parallel, GradientBuckets& buckets, const std::vector<int>& ready_after,
                           int num_nodes)
    : parallel_(parallel),
      buckets_(buckets),
      finished_by_node_(static_cast<size_t>(num_nodes)),
      completed_by_node_(static_cast<size_t>(num_nodes)) {
  for (size_t p = 0; p < ready_after.size(); ++p) {
    STRATA_CHECK(ready_after[p] >= 0 && ready_after[p] < num_nodes, "parameter {}'s gradient is made by node {}", p,
                 ready_after[p]);
    finished_by_node_[static_cast<size_t>(ready_after[p])].push_back(p);
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    int last = 0;
    for (size_t p : buckets.parameters_of(b)) last = std::max(last, ready_after.at(p));
    completed_by_node_[static_cast<size_t>(last)].push_back(b);
  }
}

void GradientSync::after_node(int node, bool last_micro_batch, const std::function<void(size_t)>& collect) {
  for (size_t p : finished_by_node_[static_cast<size_t>(node)]) collect(p);
  if (!last_micro_batch || parallel_.degree() == 1) return;
  for (size_t b : completed_by_node_[static_cast<size_t>(node)]) in_flight_.push_back(parallel_.sum_async(buckets_.bucket(b)));
  // Drive every sum in flight a little (one test() advances them all).
  if (!in_flight_.empty()) in_flight_.back().test();
}

double GradientSync::finish() {
  auto start = std::chrono::steady_clock::now();
  for (comm::Handle& handle : in_flight_) handle.wait();
  in_flight_.clear();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace strata
