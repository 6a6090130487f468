#include "parallel/distributed_gradients.h"

#include "core/error.h"

namespace strata {

namespace {

std::vector<Shape> shapes_of(const std::vector<Tensor>& tensors) {
  std::vector<Shape> shapes;
  for (const Tensor& tensor : tensors) shapes.push_back(tensor.shape());
  return shapes;
}

}  // namespace

DistributedGradients::DistributedGradients(DataParallel& parallel, DistributedGradientSettings settings,
                                           GradientEntries entries, const Device& device)
    : parallel_(parallel), settings_(settings), entries_(std::move(entries)) {
  const std::vector<Shape> shapes = shapes_of(entries_.parameters);
  reduction_ = GradientReduction::choose(
      parallel_.degree(), settings_.zero_stage, settings_.micro_batches_per_rank,
      GradientBuckets(shapes, settings_.bucket_bytes, parallel_.degree(), GradientStorage::layout_only(),
                      entries_.alone));
  reduction_.storage.device = &device;
  buckets_ = std::make_unique<GradientBuckets>(shapes, settings_.bucket_bytes, parallel_.degree(), reduction_.storage,
                                               entries_.alone);
  if (reduction_.sharded_optimizer) {
    zero_.emplace(*buckets_, parallel_.rank());
    split_head_copy(zero_->owned(), zero_->gradients());
  } else {
    const std::vector<ParameterRange> whole = ZeroPartition::whole(shapes);
    split_head_copy(whole, ZeroPartition::gradients_of(buckets_->grads(), whole));
  }
}

// The optimizer updates the parameters' ranges; the head copy's ranges (the same elements: both
// tied entries have buckets of their own) are added to the embedding's after the reduction.
void DistributedGradients::split_head_copy(const std::vector<ParameterRange>& entry_ranges,
                                           const std::vector<Tensor>& entry_grads) {
  for (size_t r = 0; r < entry_ranges.size(); ++r) {
    if (entries_.head_copy && entry_ranges[r].parameter == *entries_.head_copy) {
      head_copy_grads_.push_back(entry_grads[r]);
      continue;
    }
    ranges_.push_back(entry_ranges[r]);
    range_grads_.push_back(entry_grads[r]);
  }
  if (!entries_.head_copy) return;
  for (size_t r = 0, h = 0; r < ranges_.size(); ++r) {
    if (ranges_[r].parameter != entries_.head_copy_of) continue;
    STRATA_CHECK(h < head_copy_grads_.size() && head_copy_grads_[h].numel() == ranges_[r].length,
                 "the LM head's copy of the tied embedding is split unlike the embedding");
    head_copy_targets_.push_back(r);
    ++h;
  }
  STRATA_CHECK(head_copy_targets_.size() == head_copy_grads_.size(), "{} ranges of the tied embedding, {} of its copy",
               head_copy_targets_.size(), head_copy_grads_.size());
}

std::optional<std::string> DistributedGradients::sharded_over() const {
  if (!sharded_optimizer()) return std::nullopt;
  return data_parallel_dimension().name;
}

void DistributedGradients::start_overlap(const std::vector<int>& ready_after, int nodes) {
  sync_ = std::make_unique<GradientSync>(parallel_, *buckets_, reduction_, ready_after, nodes);
}

double DistributedGradients::finish(Dispatcher& dispatcher) {
  const double waited = sync_->finish();
  // The LM head's copy joins the embedding's gradient once, after both are summed over ranks.
  for (size_t h = 0; h < head_copy_grads_.size(); ++h) {
    Tensor& target = range_grads_[head_copy_targets_[h]];
    dispatcher.run("add", {target, head_copy_grads_[h]}, {target});
  }
  return waited;
}

void DistributedGradients::gather_updated_parameters() {
  if (zero_) zero_->all_gather_parameters(parallel_, entries_.parameters);
}

GradientBuckets DistributedGradients::parameter_scratch() const {
  std::vector<Shape> shapes = shapes_of(entries_.parameters);
  if (entries_.head_copy) shapes.pop_back();  // the copy has no moments of its own
  return GradientBuckets(shapes, settings_.bucket_bytes);
}

void DistributedGradients::sum_moment_shares(GradientBuckets& moments) {
  if (!zero_) return;
  for (size_t b = 0; b < moments.size(); ++b) parallel_.sum_async(moments.bucket(b)).wait();
}

}  // namespace strata
