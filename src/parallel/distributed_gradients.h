#pragma once
// A step's gradients over the data-parallel ranks, from the moment backward makes them to the
// ranges the optimizer updates (Megatron's DistributedDataParallel and DistributedOptimizer split):
// the buckets they are collected into and how those are reduced (GradientReduction, overlapped
// with backward by GradientSync), ZeRO's split of the optimizer's work into ranges, the LM head's
// copy of a tied embedding joined to the embedding's gradient once both are summed, the updated
// parameters gathered back after a sharded update, and the moments' sum for a checkpoint.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/dispatcher.h"
#include "parallel/data_parallel.h"
#include "parallel/gradient_buckets.h"
#include "parallel/gradient_reduction.h"
#include "parallel/gradient_sync.h"
#include "parallel/zero_partition.h"

namespace strata {

// The gradients a rank's step collects, one entry each: a held parameter's (entry k is held
// parameter k), and, last, the LM head's copy of the tied embedding when the embedding is held too.
struct GradientEntries {
  std::vector<Tensor> parameters;    // per entry, the parameter tensor it updates (shared storage)
  std::vector<size_t> alone;         // entries with buckets of their own (ZeRO blocks alike on two stages)
  std::optional<size_t> head_copy;   // the head copy's entry
  size_t head_copy_of = 0;           // the held parameter it is a copy of
};

struct DistributedGradientSettings {
  int64_t zero_stage = 0;              // parallel.zero
  int64_t micro_batches_per_rank = 1;  // of a step
  size_t bucket_bytes = 0;             // parallel.bucket_mb
};

class DistributedGradients {
 public:
  DistributedGradients(DataParallel& parallel, DistributedGradientSettings settings, GradientEntries entries,
                       const Device& device);

  // After the graphs are built: ready_after[e], the node (in GradientSync's numbering) after which
  // entry e's gradient is final, of `nodes` in all.
  void start_overlap(const std::vector<int>& ready_after, int nodes);
  GradientSync& sync() { return *sync_; }

  // The parameter ranges this rank's optimizer updates, and their summed gradients (after finish()).
  const std::vector<ParameterRange>& ranges() const { return ranges_; }
  std::vector<Tensor>& range_gradients() { return range_grads_; }
  bool sharded_optimizer() const { return zero_.has_value(); }
  // The dimension whose ranks split the optimizer's ranges between them (ZeRO), if any.
  std::optional<std::string> sharded_over() const;

  // Waits for the step's reductions and adds the head copy's gradient to the embedding's; returns
  // the seconds of communication backward did not hide.
  double finish(Dispatcher& dispatcher);
  // After a sharded update: every rank's updated ranges into every rank's parameters.
  void gather_updated_parameters();
  // Per-parameter scratch in the buckets' layout (whole moments of every held parameter).
  GradientBuckets parameter_scratch() const;
  // Under ZeRO, each rank's moments hold its ranges only (zeros elsewhere): sums them over the
  // ranks, so every rank has the whole moments (exact: one non-zero term per element).
  void sum_moment_shares(GradientBuckets& moments);

  size_t buffer_bytes() const { return buckets_->bytes(); }
  size_t buckets() const { return buckets_->size(); }
  std::string describe() const { return reduction_.describe(); }

 private:
  void split_head_copy(const std::vector<ParameterRange>& entry_ranges, const std::vector<Tensor>& entry_grads);

  DataParallel& parallel_;
  DistributedGradientSettings settings_;
  GradientEntries entries_;
  GradientReduction reduction_;
  std::unique_ptr<GradientBuckets> buckets_;
  std::optional<ZeroPartition> zero_;
  std::vector<ParameterRange> ranges_;
  std::vector<Tensor> range_grads_;
  std::vector<Tensor> head_copy_grads_;    // this rank's summed ranges of the head copy's gradient
  std::vector<size_t> head_copy_targets_;  // the range of range_grads_ each is added to
  std::unique_ptr<GradientSync> sync_;
};

}  // namespace strata
