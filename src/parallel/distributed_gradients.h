#pragma once
// A step's gradients over the ranks that share its micro-batches, from the moment backward makes them to the
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
#include "parallel/parameter_placement.h"
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

// Entries whose gradients are summed over the same ranks: the replicas of those parameters (every
// rank sharing the step's micro-batches for a dense layer; only those holding the same experts for
// an expert-parallel one).
struct GradientGroup {
  DataParallel parallel;
  std::vector<size_t> entries;  // ascending
};

// The groups of `entry_parameters` (entry e's parameter index in `placements`' order): each
// parameter summed over the batch-splitting dimensions of `mesh` that do not split it.
std::vector<GradientGroup> gradient_groups(DeviceMesh* mesh, const MeshPlacements& placements,
                                           const std::vector<size_t>& entry_parameters);

class DistributedGradients {
 public:
  DistributedGradients(std::vector<GradientGroup> groups, DistributedGradientSettings settings,
                       GradientEntries entries, const Device& device);

  // After the graphs are built: ready_after[e], the node (in GradientSync's numbering) after which
  // entry e's gradient is final, of `nodes` in all.
  void start_overlap(const std::vector<int>& ready_after, int nodes);
  // GradientSync's, for every group: after node `node` of a micro-batch, collects the gradients it
  // finished (collect gets entry indices) and starts the reductions of the buckets it completed.
  void after_node(int node, bool first_micro_batch, bool last_micro_batch, const GradientSync::Collect& collect);
  // Where entry e's gradient is collected on every micro-batch, or nullptr where buckets are staged.
  const Tensor* collected_into(size_t entry) const;
  // Entry e's gradient is collected and updated in `dtype` (bf16 or f16, in its bucket's bytes), as the
  // graph makes it: only where nothing sums it (one micro-batch, one rank, not the tied embedding's).
  void narrow(size_t entry, DType dtype);

  // The parameter ranges this rank's optimizer updates, and their summed gradients (after finish()).
  const std::vector<ParameterRange>& ranges() const { return ranges_; }
  std::vector<Tensor>& range_gradients() { return range_grads_; }
  bool sharded_optimizer() const;
  // The dimensions whose ranks split the optimizer's ranges between them (ZeRO), if any.
  std::vector<std::string> sharded_over() const;

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

  size_t buffer_bytes() const;
  size_t buckets() const;
  std::string describe() const;

 private:
  // One group's reduction: its entries' buckets, reduced over its ranks.
  struct Reduction {
    GradientGroup group;
    std::vector<Tensor> parameters;  // its entries' tensors, in order
    GradientReduction reduction;
    std::unique_ptr<GradientBuckets> buckets;
    std::optional<ZeroPartition> zero;
    std::unique_ptr<GradientSync> sync;
  };
  void add_reduction(GradientGroup group, const Device& device, std::vector<ParameterRange>& entry_ranges,
                     std::vector<Tensor>& entry_grads);
  void split_head_copy(const std::vector<ParameterRange>& entry_ranges, const std::vector<Tensor>& entry_grads);

  DistributedGradientSettings settings_;
  GradientEntries entries_;
  std::vector<Reduction> reductions_;
  std::vector<ParameterRange> ranges_;
  std::vector<Tensor> range_grads_;
  std::vector<Tensor> head_copy_grads_;    // this rank's summed ranges of the head copy's gradient
  std::vector<size_t> head_copy_targets_;  // the range of range_grads_ each is added to
};

}  // namespace strata
