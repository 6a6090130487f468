#pragma once
// Gradient reduction overlapped with the backward pass. The executor reports
// each node it finishes. With whole buckets, each gradient is collected
// (copied, or added on later micro-batches) into its bucket right after the
// node that finishes it; on the step's last micro-batch, a bucket's collective
// (GradientReduction) starts as soon as its last gradient is in, while
// backward goes on, as DDP does (earlier micro-batches only accumulate, as
// DDP's no_sync); all-gathers that follow reduce-scatters (ZeRO-0 at three or
// more ranks) start in finish(). Without whole buckets (ZeRO-2, one micro-batch per rank) a
// completed bucket is collected into a staging buffer and reduce-scattered
// from there; a staging buffer is reused once its reduce-scatter is done. In-
// flight collectives make progress between kernels. One process collects the
// same way and communicates nothing. Buckets on a device are all-reduced
// through host copies: when a bucket completes, a read of it is queued behind
// the kernels that made it and the host goes on queueing the rest of backward;
// the read's event says when the bytes are in, and the bucket's collective
// starts then (in bucket order, as every rank must); finish() writes the sums back.
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/gradient_buckets.h"
#include "parallel/gradient_reduction.h"

namespace strata {

class GradientSync {
 public:
  // Copies (or, when `accumulate`, adds) parameter p's gradient into `destination`.
  using Collect = std::function<void(size_t parameter, Tensor& destination, bool accumulate)>;

  // ready_after[p]: the node of the training graph after which parameter p's
  // gradient is final; num_nodes: the graph's node count. Without whole
  // buckets, gradients are read when their bucket completes, so the graph
  // must keep every gradient until the end of the run.
  GradientSync(DataParallel& parallel, GradientBuckets& buckets, GradientReduction reduction,
               const std::vector<int>& ready_after, int num_nodes);

  // After node `node` of a micro-batch's run: collects what the node finished
  // and starts the collectives of the buckets it completed (last micro-batch).
  void after_node(int node, bool first_micro_batch, bool last_micro_batch, const Collect& collect);
  // The tensor parameter p's gradient is collected into on every micro-batch
  // (its place in its bucket), or nullptr where buckets are staged.
  const Tensor* collected_into(size_t parameter) const;
  // Waits for every collective of the step; returns the seconds spent waiting
  // in it and for staging buffers during backward (the communication the
  // backward pass did not hide).
  double finish();

 private:
  struct InFlight {
    size_t bucket = 0;
    comm::Handle handle;
    bool gather_next = false;  // a reduce-scatter that an all-gather follows
    int staging_slot = -1;
    bool through_host = false;  // a device bucket, reduced in its host copy
    std::shared_ptr<DeviceEvent> read;  // set until the host copy is in and the collective started
  };
  void start_read_buckets(bool wait);  // the collectives of buckets whose reads are in, in order
  void start(size_t bucket, const Collect& collect);
  int free_staging_slot();
  void advance();  // drives everything in flight
  double waited(std::chrono::steady_clock::time_point since) const;

  DataParallel& parallel_;
  GradientBuckets& buckets_;
  GradientReduction reduction_;
  std::vector<std::vector<size_t>> finished_by_node_;   // node -> parameters
  std::vector<std::vector<size_t>> completed_by_node_;  // node -> buckets
  std::deque<InFlight> in_flight_;
  std::vector<Tensor> host_buckets_;  // per bucket on a device: its host copy, made on first use
  int next_staging_slot_ = 0;
  double waited_in_backward_s_ = 0;
};

}  // namespace strata
