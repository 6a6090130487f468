#include "planner/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "parallel/parallel_dimension.h"
#include "planner/plan_dimension.h"

namespace strata {

namespace {

// Plans the closed-form ranking keeps beyond those asked for, so that replaying the schedules can
// reorder the front runners.
constexpr size_t kReplayedBeyondKept = 16;

class Rejections {
 public:
  explicit Rejections(std::vector<RejectedRegion>& regions) : regions_(regions) {}
  // `example` is called only for a region's first member.
  template <typename Example>
  void add(const std::string& reason, Example example) {
    for (RejectedRegion& region : regions_) {
      if (region.reason == reason) {
        ++region.count;
        return;
      }
    }
    regions_.push_back({reason, 1, example(), {}});
  }

 private:
  std::vector<RejectedRegion>& regions_;
};

bool within(const PlanLimits& limits, std::string_view dimension, int degree) {
  const int fixed = limits.fixed[dimension], largest = limits.largest[dimension];
  return (fixed == 0 || fixed == degree) && (largest == 0 || degree <= largest);
}

// "data" ("data x expert" under expert parallelism): the batch-splitting dimensions a message names.
std::string batch_parallelism(const DimensionDegrees& degrees, const std::vector<PlannerDimension>& parts) {
  std::string text;
  for (const PlannedDimension& planned : planned_dimensions()) {
    const ParallelDimension& dimension = *planned.dimension;
    if (!dimension.splits_batch || (dimension.named_when_set_only && degrees[dimension.name] == 1)) continue;
    for (const PlannerDimension& part : parts) {
      if (part.name == dimension.name) text += (text.empty() ? "" : " x ") + part.parallelism;
    }
  }
  return text;
}

// One search's enumeration: the layouts, outermost dimension first, and every plan of each.
class LayoutEnumeration {
 public:
  LayoutEnumeration(const PlanningProblem& problem, const PlanLimits& limits, Rejections& reject,
                    std::vector<ParallelPlan>& plans)
      : problem_(problem), limits_(limits), reject_(reject), plans_(plans), parts_(planner_dimensions()) {}

  // Each dimension's degrees with `devices` left to it and those after it.
  void choose_degrees(size_t next, int devices, DimensionDegrees& degrees) {
    const PlannerDimension& part = parts_[next];
    if (part.takes_remaining_devices) {
      if (!within(limits_, part.name, devices)) return;
      degrees.set(part.name, devices);
      add_layout(degrees);
      return;
    }
    for (int degree : searched_degrees(part, devices)) {
      if (devices % degree != 0 || !within(limits_, part.name, degree)) continue;
      degrees.set(part.name, degree);
      choose_degrees(next + 1, devices / degree, degrees);
    }
    degrees.set(part.name, 1);
  }

 private:
  std::vector<int> searched_degrees(const PlannerDimension& part, int devices) const {
    // A dimension Strata's runtime does not execute is priced at the degree the user fixes, never proposed.
    if (!part.runtime_executes) return {std::max(limits_.fixed[part.name], 1)};
    return part.degrees ? part.degrees(problem_, devices) : std::vector<int>{1};
  }

  void add_layout(const DimensionDegrees& degrees) {
    const std::string layout = degrees.describe();
    for (const PlannerDimension& part : parts_) {
      if (!part.reject_layout) continue;
      if (auto why = part.reject_layout(problem_, degrees[part.name])) {
        reject_.add(*why, [&] { return layout; });
        return;
      }
    }
    const int replicas = degrees.batch_replicas();
    if (problem_.global_batch % replicas != 0) {
      reject_.add(fmt::format("layouts whose {} parallelism does not divide the global batch of {} rows",
                              batch_parallelism(degrees, parts_), problem_.global_batch),
                  [&] { return layout; });
      return;
    }
    const int64_t rows = problem_.global_batch / replicas;
    if (limits_.micro_batch && rows % *limits_.micro_batch != 0) {
      reject_.add(
          fmt::format("layouts whose rows per replica are not a multiple of the micro-batch {}", *limits_.micro_batch),
          [&] { return layout; });
      return;
    }
    ParallelPlan plan;
    plan.degrees = degrees;
    for (int64_t micro_batch : divisors(rows)) {
      if (limits_.micro_batch ? micro_batch != *limits_.micro_batch : micro_batch > limits_.max_micro_batch) continue;
      plan.micro_batch = micro_batch;
      plan.micro_batches = rows / micro_batch;
      for (plan.zero = 0; plan.zero <= 3; ++plan.zero) {
        // ZeRO shards over the replicas: nothing to shard without them.
        if (limits_.zero ? plan.zero != *limits_.zero : (replicas == 1 && plan.zero > 0)) continue;
        for (RecomputeMode recompute : kRecomputeModes) {
          if (limits_.recompute && *limits_.recompute != recompute) continue;
          plan.recompute = recompute;
          add_options(0, plan);
        }
      }
    }
  }

  // `plan` along the options of the dimensions from `next` on.
  void add_options(size_t next, const ParallelPlan& plan) {
    while (next < parts_.size() && !parts_[next].options) ++next;
    if (next == parts_.size()) {
      plans_.push_back(plan);
      return;
    }
    const OptionSearch search{problem_, limits_, [this](const std::string& reason, const ParallelPlan& rejected) {
                                reject_.add(reason, [&] { return rejected.describe(); });
                              }};
    parts_[next].options(plan, search, [&](const ParallelPlan& option) { add_options(next + 1, option); });
  }

  const PlanningProblem& problem_;
  const PlanLimits& limits_;
  Rejections& reject_;
  std::vector<ParallelPlan>& plans_;
  const std::vector<PlannerDimension> parts_;
};

// Why the degrees the user fixed cannot make a layout of the cluster, or nothing.
std::optional<RejectedRegion> fixed_degrees_refused(const PlanningProblem& problem, const PlanLimits& limits) {
  const int devices = problem.cluster.devices();
  DimensionDegrees layout;
  bool every_dimension_fixed = true;  // of those that apply to every model
  for (const PlannedDimension& planned : planned_dimensions()) {
    const ParallelDimension& dimension = *planned.dimension;
    const int fixed = limits.fixed[dimension.name];
    if (fixed > 0 && devices % fixed != 0) {
      return RejectedRegion{fmt::format("fixed degrees that do not divide the cluster's {} devices", devices), 1,
                            fmt::format("{}={}", dimension.name, fixed), {}};
    }
    if (fixed > 0) layout.set(dimension.name, fixed);
    every_dimension_fixed = every_dimension_fixed && (fixed > 0 || dimension.named_when_set_only);
  }
  if (every_dimension_fixed && layout.product() != devices) {
    return RejectedRegion{
        fmt::format("fixed layouts whose {} is not the cluster's {} devices", degrees_product_name(), devices), 1,
        layout.describe(), {}};
  }
  for (const PlannerDimension& part : planner_dimensions()) {
    const int fixed = limits.fixed[part.name];
    if (fixed == 0 || !part.refuse_fixed) continue;
    if (auto why = part.refuse_fixed(problem, fixed)) {
      return RejectedRegion{*why, 1, fmt::format("{}={}", part.name, fixed), {}};
    }
  }
  return std::nullopt;
}

}  // namespace

bool ranks_before(const Prediction& a, const Prediction& b) {
  if (a.step_s != b.step_s) return a.step_s < b.step_s;
  return a.plan.describe() < b.plan.describe();
}

std::vector<ParallelPlan> enumerate_plans(const CostModel& model, const PlanLimits& limits,
                                          std::vector<RejectedRegion>& rejected) {
  const PlanningProblem& problem = model.problem();
  std::vector<ParallelPlan> plans;
  if (auto refused = fixed_degrees_refused(problem, limits)) {
    rejected.push_back(std::move(*refused));
    return plans;
  }
  Rejections reject(rejected);
  DimensionDegrees degrees;
  LayoutEnumeration(problem, limits, reject, plans).choose_degrees(0, problem.cluster.devices(), degrees);
  return plans;
}

SearchResult rank_plans(CostModel& model, const std::vector<ParallelPlan>& candidates, size_t keep) {
  const size_t wanted = keep;
  keep += keep > 0 ? kReplayedBeyondKept : 0;
  SearchResult result;
  Rejections reject(result.rejected);
  struct LayoutMemory {
    bool fits = false;
    double least_peak = 0;
  };
  std::map<DimensionDegrees, LayoutMemory> layouts;
  struct Miss {
    ParallelPlan plan;
    MemoryBreakdown memory;  // its highest stage
  };
  int64_t out_of_memory = 0;
  std::optional<Miss> closest_miss;
  for (const ParallelPlan& plan : candidates) {
    if (auto why = model.invalid_reason(plan)) {
      reject.add(*why, [&] { return plan.describe(); });
      continue;
    }
    // Most plans do not fit: their memory is all the search needs of them, their time is not priced.
    CostModel::Placement placement = model.place(plan);
    const MemoryBreakdown memory = placement.highest();
    ++result.candidates;
    auto [entry, inserted] = layouts.try_emplace(plan.degrees, LayoutMemory{false, memory.peak});
    entry->second.least_peak = std::min(entry->second.least_peak, memory.peak);
    if (memory.peak > memory.capacity) {
      ++out_of_memory;
      if (!closest_miss || memory.peak < closest_miss->memory.peak ||
          (memory.peak == closest_miss->memory.peak && plan.describe() < closest_miss->plan.describe())) {
        closest_miss = Miss{plan, memory};
      }
      continue;
    }
    Prediction prediction = model.evaluate(plan, std::move(placement));
    entry->second.fits = true;
    ++result.feasible;
    if (result.ranked.size() == keep && (keep == 0 || !ranks_before(prediction, result.ranked.back()))) continue;
    auto at = std::upper_bound(result.ranked.begin(), result.ranked.end(), prediction, ranks_before);
    result.ranked.insert(at, std::move(prediction));
    if (result.ranked.size() > keep) result.ranked.pop_back();
  }
  // The front runners again, their pipelines timed by replaying the schedule.
  for (Prediction& prediction : result.ranked) {
    prediction = model.evaluate(prediction.plan, CostModel::PipelineTiming::Replayed);
  }
  std::sort(result.ranked.begin(), result.ranked.end(), ranks_before);
  if (result.ranked.size() > wanted) result.ranked.resize(wanted);
  if (out_of_memory > 0) {
    RejectedRegion region{"plans that do not fit in device memory", out_of_memory, closest_miss->plan.describe(), {}};
    double usable = closest_miss->memory.capacity / kGiB;
    region.details.push_back(fmt::format("closest miss {} needs {:.1f} GiB per device, {:.1f} GiB usable",
                                         closest_miss->plan.describe(), closest_miss->memory.peak / kGiB, usable));
    for (const auto& [layout, memory] : layouts) {
      if (memory.fits) continue;
      region.details.push_back(fmt::format("{}: no variant fits; the least needs {:.1f} GiB per device",
                                           layout.describe(), memory.least_peak / kGiB));
    }
    result.rejected.push_back(std::move(region));
  }
  return result;
}

SearchResult search_plans(CostModel& model, const PlanLimits& limits, size_t keep) {
  auto start = std::chrono::steady_clock::now();
  std::vector<RejectedRegion> rejected;
  std::vector<ParallelPlan> candidates = enumerate_plans(model, limits, rejected);
  SearchResult result = rank_plans(model, candidates, keep);
  rejected.insert(rejected.end(), result.rejected.begin(), result.rejected.end());
  result.rejected = std::move(rejected);
  result.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace strata
