#include "parallel/gradient_sync.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace strata {

GradientSync::GradientSync(DataParallel& parallel, GradientBuckets& buckets, GradientReduction reduction,
                           const std::vector<int>& ready_after, int num_nodes)
    : parallel_(parallel),
      buckets_(buckets),
      reduction_(reduction),
      finished_by_node_(static_cast<size_t>(num_nodes)),
      completed_by_node_(static_cast<size_t>(num_nodes)) {
  STRATA_CHECK(reduction.storage.whole || reduction.collective == GradientCollective::ReduceScatter,
               "gradients without whole buckets must be reduce-scattered");
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

void GradientSync::after_node(int node, bool first_micro_batch, bool last_micro_batch, const Collect& collect) {
  if (reduction_.storage.whole) {
    for (size_t p : finished_by_node_[static_cast<size_t>(node)]) {
      collect(p, buckets_.grads()[p], !first_micro_batch);
    }
  } else {
    STRATA_CHECK(first_micro_batch && last_micro_batch, "staged gradients with more than one micro-batch per rank");
  }
  if (!last_micro_batch || reduction_.collective == GradientCollective::None) return;
  for (size_t b : completed_by_node_[static_cast<size_t>(node)]) start(b, collect);
  advance();
}

const Tensor* GradientSync::collected_into(size_t parameter) const {
  return reduction_.storage.whole ? &buckets_.grads().at(parameter) : nullptr;
}

void GradientSync::start(size_t bucket, const Collect& collect) {
  InFlight call{.bucket = bucket};
  switch (reduction_.collective) {
    case GradientCollective::AllReduce:
      if (buckets_.bucket(bucket).on_host()) {
        call.handle = parallel_.sum_async(buckets_.bucket(bucket));
        break;
      }
      {
        const Tensor& on_device = buckets_.bucket(bucket);
        host_buckets_.resize(buckets_.size());
        if (!host_buckets_[bucket].defined()) host_buckets_[bucket] = Tensor::empty(on_device.shape(), DType::F32);
        call.read = on_device.device().copy_to_host_async(on_device.buffer(), on_device.offset_bytes(),
                                                          host_buckets_[bucket].raw(), on_device.nbytes());
        call.through_host = true;
      }
      break;
    case GradientCollective::ReduceScatterThenAllGather:
      call.handle = parallel_.reduce_scatter_async(buckets_.bucket(bucket), buckets_.shard(bucket));
      call.gather_next = true;
      break;
    case GradientCollective::ReduceScatter:
      if (reduction_.storage.whole) {
        call.handle = parallel_.reduce_scatter_async(buckets_.bucket(bucket), buckets_.shard(bucket));
        break;
      }
      {
        call.staging_slot = free_staging_slot();
        Tensor& staging = buckets_.staging(call.staging_slot);
        for (size_t p : buckets_.parameters_of(bucket)) {
          Tensor destination = buckets_.view(staging, p);
          collect(p, destination, /*accumulate=*/false);
        }
        // The padding after the bucket's gradients may hold a larger bucket's from the slot's last use.
        const int64_t padded = buckets_.block(bucket) * buckets_.ranks();
        float* data = staging.data<float>();
        std::fill(data + buckets_.elements(bucket), data + padded, 0.0f);
        call.handle = parallel_.reduce_scatter_async(staging.narrow(0, 0, padded), buckets_.shard(bucket));
      }
      break;
    case GradientCollective::None: return;
  }
  in_flight_.push_back(std::move(call));
}

int GradientSync::free_staging_slot() {
  const int slot = next_staging_slot_;
  next_staging_slot_ = (next_staging_slot_ + 1) % buckets_.staging_slots();
  // Slots are used in start order, so the call holding this one started earlier: waiting cannot deadlock.
  for (InFlight& call : in_flight_) {
    if (call.staging_slot != slot) continue;
    auto start = std::chrono::steady_clock::now();
    call.handle.wait();
    waited_in_backward_s_ += waited(start);
    call.staging_slot = -1;
  }
  return slot;
}

void GradientSync::start_read_buckets(bool wait) {
  for (InFlight& call : in_flight_) {
    if (!call.read) continue;
    if (wait) {
      call.read->wait();
    } else if (!call.read->done()) {
      return;  // a later bucket waits for this one: the ranks start their collectives in the same order
    }
    call.read.reset();
    call.handle = parallel_.sum_async(host_buckets_[call.bucket]);
  }
}

void GradientSync::advance() {
  start_read_buckets(/*wait=*/false);
  // One test() drives every call in flight.
  for (auto call = in_flight_.rbegin(); call != in_flight_.rend(); ++call) {
    if (call->handle.valid()) {
      call->handle.test();
      return;
    }
  }
}

double GradientSync::finish() {
  auto start = std::chrono::steady_clock::now();
  start_read_buckets(/*wait=*/true);
  // All-gathers start here, in bucket order, never when a rank happens to see a reduce-scatter done:
  // every rank must issue its collectives in the same order.
  for (InFlight& call : in_flight_) {
    call.handle.wait();
    if (call.gather_next) {
      call.handle = parallel_.all_gather_async(buckets_.shard(call.bucket), buckets_.bucket(call.bucket));
      call.gather_next = false;
    }
  }
  for (InFlight& call : in_flight_) {
    call.handle.wait();
    if (call.through_host) buckets_.bucket(call.bucket).copy_from(host_buckets_[call.bucket]);
  }
  in_flight_.clear();
  next_staging_slot_ = 0;
  const double total = waited(start) + waited_in_backward_s_;
  waited_in_backward_s_ = 0;
  return total;
}

double GradientSync::waited(std::chrono::steady_clock::time_point since) const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace strata
