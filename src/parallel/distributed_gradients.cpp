#include "parallel/distributed_gradients.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace strata {

namespace {

std::vector<Shape> shapes_of(const std::vector<Tensor>& tensors) {
  std::vector<Shape> shapes;
  for (const Tensor& tensor : tensors) shapes.push_back(tensor.shape());
  return shapes;
}

}  // namespace

std::vector<GradientGroup> gradient_groups(DeviceMesh* mesh, const MeshPlacements& placements,
                                           const std::vector<size_t>& entry_parameters) {
  std::map<std::vector<std::string>, std::vector<size_t>> by_dimensions;
  for (size_t e = 0; e < entry_parameters.size(); ++e) {
    std::vector<std::string> replicas;
    for (const std::string& dimension : batch_dimensions()) {
      const auto placed = placements.find(dimension);
      if (placed == placements.end() || !placed->second.at(entry_parameters[e]).split()) replicas.push_back(dimension);
    }
    by_dimensions[replicas].push_back(e);
  }
  // The most replicated first: the dense layers' group, where a job without experts has all its entries.
  std::vector<std::pair<std::vector<std::string>, std::vector<size_t>>> ordered(by_dimensions.begin(),
                                                                                by_dimensions.end());
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  std::vector<GradientGroup> groups;
  for (auto& [replicas, entries] : ordered) groups.push_back({DataParallel::over(mesh, replicas), std::move(entries)});
  return groups;
}

DistributedGradients::DistributedGradients(std::vector<GradientGroup> groups, DistributedGradientSettings settings,
                                           GradientEntries entries, const Device& device)
    : settings_(settings), entries_(std::move(entries)) {
  std::vector<ParameterRange> entry_ranges;
  std::vector<Tensor> entry_grads;
  for (GradientGroup& group : groups) add_reduction(std::move(group), device, entry_ranges, entry_grads);
  split_head_copy(entry_ranges, entry_grads);
}

// A group's buckets, reduction and (ZeRO) partition; its ranges join `entry_ranges` by entry index.
void DistributedGradients::add_reduction(GradientGroup group, const Device& device,
                                         std::vector<ParameterRange>& entry_ranges, std::vector<Tensor>& entry_grads) {
  Reduction& r = reductions_.emplace_back();
  r.group = std::move(group);
  std::vector<size_t> alone;
  for (size_t local = 0; local < r.group.entries.size(); ++local) {
    const size_t entry = r.group.entries[local];
    r.parameters.push_back(entries_.parameters.at(entry));
    if (std::find(entries_.alone.begin(), entries_.alone.end(), entry) != entries_.alone.end()) alone.push_back(local);
  }
  const std::vector<Shape> shapes = shapes_of(r.parameters);
  const int degree = r.group.parallel.degree();
  r.reduction = GradientReduction::choose(
      degree, settings_.zero_stage, settings_.micro_batches_per_rank,
      GradientBuckets(shapes, settings_.bucket_bytes, degree, GradientStorage::layout_only(), alone));
  r.reduction.storage.device = &device;
  r.buckets = std::make_unique<GradientBuckets>(shapes, settings_.bucket_bytes, degree, r.reduction.storage, alone);
  std::vector<ParameterRange> ranges;
  std::vector<Tensor> grads;
  if (r.reduction.sharded_optimizer) {
    r.zero.emplace(*r.buckets, r.group.parallel.rank());
    ranges = r.zero->owned();
    grads = r.zero->gradients();
  } else {
    ranges = ZeroPartition::whole(shapes);
    grads = ZeroPartition::gradients_of(r.buckets->grads(), ranges);
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    ranges[i].parameter = r.group.entries[ranges[i].parameter];
    entry_ranges.push_back(ranges[i]);
    entry_grads.push_back(grads[i]);
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

bool DistributedGradients::sharded_optimizer() const {
  return std::any_of(reductions_.begin(), reductions_.end(), [](const Reduction& r) { return r.zero.has_value(); });
}

std::vector<std::string> DistributedGradients::sharded_over() const {
  std::vector<std::string> dimensions;
  for (const Reduction& r : reductions_) {
    if (!r.zero) continue;
    for (const std::string& dimension : r.group.parallel.dimensions()) {
      if (std::find(dimensions.begin(), dimensions.end(), dimension) == dimensions.end()) {
        dimensions.push_back(dimension);
      }
    }
  }
  return dimensions;
}

void DistributedGradients::start_overlap(const std::vector<int>& ready_after, int nodes) {
  for (Reduction& r : reductions_) {
    std::vector<int> mine;
    for (size_t entry : r.group.entries) mine.push_back(ready_after.at(entry));
    r.sync = std::make_unique<GradientSync>(r.group.parallel, *r.buckets, r.reduction, mine, nodes);
  }
}

void DistributedGradients::after_node(int node, bool first_micro_batch, bool last_micro_batch,
                                      const GradientSync::Collect& collect) {
  for (Reduction& r : reductions_) {
    r.sync->after_node(node, first_micro_batch, last_micro_batch,
                       [&](size_t local, Tensor& destination, bool accumulate) {
                         collect(r.group.entries[local], destination, accumulate);
                       });
  }
}

const Tensor* DistributedGradients::collected_into(size_t entry) const {
  for (const Reduction& r : reductions_) {
    const auto found = std::find(r.group.entries.begin(), r.group.entries.end(), entry);
    if (found != r.group.entries.end()) {
      return r.sync->collected_into(static_cast<size_t>(found - r.group.entries.begin()));
    }
  }
  fail("gradient entry {} is in no reduction group", entry);
}

void DistributedGradients::narrow(size_t entry, DType dtype) {
  const bool tied = entries_.head_copy && (entry == *entries_.head_copy || entry == entries_.head_copy_of);
  STRATA_CHECK(settings_.micro_batches_per_rank == 1 && !tied,
               "gradient entry {} narrowed, but it is summed (micro-batches per rank {}, tied {})", entry,
               settings_.micro_batches_per_rank, tied);
  for (Reduction& r : reductions_) {
    const auto found = std::find(r.group.entries.begin(), r.group.entries.end(), entry);
    if (found == r.group.entries.end()) continue;
    STRATA_CHECK(r.group.parallel.degree() == 1 && !r.zero && r.buckets->whole(),
                 "gradient entry {} narrowed, but it is reduced over {} ranks", entry, r.group.parallel.degree());
    Tensor& collected = r.buckets->grads()[static_cast<size_t>(found - r.group.entries.begin())];
    collected = collected.reinterpreted(dtype);
    for (size_t g = 0; g < ranges_.size(); ++g) {
      if (ranges_[g].parameter != entry) continue;
      STRATA_CHECK(ranges_[g].begin == 0 && ranges_[g].length == collected.numel(),
                   "gradient entry {} narrowed, but the optimizer updates a part of it", entry);
      range_grads_[g] = collected.reshape({collected.numel()});
    }
    return;
  }
  fail("gradient entry {} is in no reduction group", entry);
}

double DistributedGradients::finish(Dispatcher& dispatcher) {
  double waited = 0;
  for (Reduction& r : reductions_) waited += r.sync->finish();
  // The LM head's copy joins the embedding's gradient once, after both are summed over ranks.
  for (size_t h = 0; h < head_copy_grads_.size(); ++h) {
    Tensor& target = range_grads_[head_copy_targets_[h]];
    dispatcher.run("add", {target, head_copy_grads_[h]}, {target});
  }
  return waited;
}

void DistributedGradients::gather_updated_parameters() {
  for (Reduction& r : reductions_) {
    if (r.zero) r.zero->all_gather_parameters(r.group.parallel, r.parameters);
  }
}

GradientBuckets DistributedGradients::parameter_scratch() const {
  std::vector<Shape> shapes = shapes_of(entries_.parameters);
  if (entries_.head_copy) shapes.pop_back();  // the copy has no moments of its own
  return GradientBuckets(shapes, settings_.bucket_bytes);
}

void DistributedGradients::sum_moment_shares(GradientBuckets& moments) {
  for (Reduction& r : reductions_) {
    if (!r.zero) continue;
    for (size_t entry : r.group.entries) {
      if (entries_.head_copy && entry == *entries_.head_copy) continue;
      r.group.parallel.sum_async(moments.grads().at(entry)).wait();
    }
  }
}

size_t DistributedGradients::buffer_bytes() const {
  size_t bytes = 0;
  for (const Reduction& r : reductions_) bytes += r.buckets->bytes();
  return bytes;
}

size_t DistributedGradients::buckets() const {
  size_t buckets = 0;
  for (const Reduction& r : reductions_) buckets += r.buckets->size();
  return buckets;
}

// One group: as before; several: each prefixed with the dimensions its ranks span.
std::string DistributedGradients::describe() const {
  if (reductions_.size() == 1) return reductions_.front().reduction.describe();
  std::vector<std::string> parts;
  for (const Reduction& r : reductions_) {
    const std::vector<std::string>& dimensions = r.group.parallel.dimensions();
    parts.push_back(fmt::format("over {}: {}", dimensions.empty() ? "one rank" : fmt::format("{}", fmt::join(dimensions, "+")),
                                r.reduction.describe()));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace strata
