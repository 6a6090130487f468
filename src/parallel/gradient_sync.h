#pragma once
// Gradient reduction overlapped with the backward pass. The executor reports
// each node it finishes; as soon as every gradient of a bucket is final, the
// bucket's parameters are collected into it and, on the step's last
// micro-batch, its sum over the data-parallel ranks starts while backward
// goes on (earlier micro-batches only accumulate, as DDP's no_sync). In-flight
// sums make progress between kernels. One process collects the same way and
// communicates nothing.
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/gradient_buckets.h"

namespace strata {

class GradientSync {
 public:
  // ready_after[p]: the node of the training graph after which parameter p's
  // gradient is final; num_nodes: the graph's node count.
  GradientSync(DataParallel& parallel, GradientBuckets& buckets, const std::vector<int>& ready_after, int num_nodes);

  // After node `node` of a micro-batch's run: calls collect(p) for every
  // parameter whose gradient that node finished, then starts the sums of the
  // buckets it completed (on the last micro-batch).
  void after_node(int node, bool last_micro_batch, const std::function<void(size_t parameter)>& collect);
  // Waits for every sum of the step; returns the seconds spent waiting (the
  // communication the backward pass did not hide).
  double finish();

 private:
  DataParallel& parallel_;
  GradientBuckets& buckets_;
  std::vector<std::vector<size_t>> finished_by_node_;  // node -> parameters
  std::vector<std::vector<size_t>> completed_by_node_;  // node -> buckets
  std::vector<comm::Handle> in_flight_;
};

}  // namespace strata
