#include "planner/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

namespace strata {

namespace {

// Plans the closed-form ranking keeps beyond those asked for, so that replaying the schedules can
// reorder the front runners.
constexpr size_t kReplayedBeyondKept = 16;
const std::string kInterleaveReason = "interleaved plans whose micro-batch count is not a multiple of pp";

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> result;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    result.push_back(i);
    if (i != n / i) result.push_back(n / i);
  }
  std::sort(result.begin(), result.end());
  return result;
}

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

std::string layout_name(int dp, int tp, int pp, int ep) {
  return fmt::format("dp={} tp={} pp={}{}", dp, tp, pp, ep > 1 ? fmt::format(" ep={}", ep) : "");
}

// The expert-parallel degrees to search: those dividing the experts and the devices (a dense model: 1).
std::vector<int> expert_degrees(const ModelConfig& model, int devices, const PlanLimits& limits) {
  std::vector<int> degrees;
  for (int64_t ep : divisors(std::max<int64_t>(model.num_experts, 1))) {
    if (devices % ep != 0 || (limits.max_ep > 0 && ep > limits.max_ep)) continue;
    if (!limits.ep || *limits.ep == ep) degrees.push_back(static_cast<int>(ep));
  }
  return degrees;
}

template <typename T>
bool allowed(const std::optional<T>& fixed, const T& value) {
  return !fixed || *fixed == value;
}

// The plans of every layout with expert parallelism `ep`.
void add_layouts(const CostModel& model, const PlanLimits& limits, int ep, Rejections& reject,
                 std::vector<ParallelPlan>& plans) {
  const PlanningProblem& problem = model.problem();
  const int devices = problem.cluster.devices() / ep;
  const int64_t layers = problem.model.n_layer;
  for (int64_t tp64 : divisors(devices)) {
    int tp = static_cast<int>(tp64);
    if (!allowed(limits.tp, tp) || (limits.max_tp > 0 && tp > limits.max_tp)) continue;
    for (int64_t pp64 : divisors(devices / tp)) {
      int pp = static_cast<int>(pp64);
      int dp = devices / tp / pp;
      if (!allowed(limits.pp, pp) || (limits.max_pp > 0 && pp > limits.max_pp) || !allowed(limits.dp, dp)) continue;
      std::string layout = layout_name(dp, tp, pp, ep);
      if (problem.model.n_head % tp != 0) {
        reject.add(fmt::format("layouts whose tensor parallelism does not divide the {} heads", problem.model.n_head),
                   [&] { return layout; });
        continue;
      }
      if (pp > layers) {
        reject.add(fmt::format("layouts with more pipeline stages than the {} layers", layers), [&] { return layout; });
        continue;
      }
      if (problem.global_batch % (dp * ep) != 0) {
        reject.add(fmt::format("layouts whose data {}parallelism does not divide the global batch of {} rows",
                               ep > 1 ? "x expert " : "", problem.global_batch),
                   [&] { return layout; });
        continue;
      }
      const int64_t rows = problem.global_batch / (dp * ep);
      if (limits.micro_batch && rows % *limits.micro_batch != 0) {
        reject.add(
            fmt::format("layouts whose rows per replica are not a multiple of the micro-batch {}", *limits.micro_batch),
            [&] { return layout; });
        continue;
      }
      for (int64_t micro_batch : divisors(rows)) {
        if (limits.micro_batch ? micro_batch != *limits.micro_batch : micro_batch > limits.max_micro_batch) continue;
        const int64_t micro_batches = rows / micro_batch;
        for (bool sp : {false, true}) {
          if (!allowed(limits.sp, sp) || (sp && tp == 1)) continue;
          for (int zero = 0; zero <= 3; ++zero) {
            if (limits.zero ? zero != *limits.zero : (dp * ep == 1 && zero > 0)) continue;
            for (RecomputeMode recompute : kRecomputeModes) {
              if (!allowed(limits.recompute, recompute)) continue;
              ParallelPlan plan{dp, tp, pp, sp, micro_batch, micro_batches, zero, recompute};
              plan.ep = ep;
              if (pp == 1) {
                if (allowed(limits.schedule, PipelineSchedule::OneFOneB) && allowed(limits.virtual_stages, 1)) {
                  plans.push_back(plan);
                }
                continue;
              }
              for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
                if (!allowed(limits.schedule, schedule) || !allowed(limits.virtual_stages, 1)) continue;
                plan.schedule = schedule;
                plans.push_back(plan);
              }
              if (!allowed(limits.schedule, PipelineSchedule::Interleaved)) continue;
              plan.schedule = PipelineSchedule::Interleaved;
              for (int v = 2; v <= limits.max_virtual_stages && pp * v <= layers; ++v) {
                if (!allowed(limits.virtual_stages, v)) continue;
                plan.virtual_stages = v;
                if (micro_batches % pp != 0) {
                  reject.add(kInterleaveReason, [&] { return plan.describe(); });
                  continue;
                }
                plans.push_back(plan);
              }
              plan.virtual_stages = 1;
            }
          }
        }
      }
    }
  }
}

}  // namespace

bool ranks_before(const Prediction& a, const Prediction& b) {
  if (a.step_s != b.step_s) return a.step_s < b.step_s;
  return a.plan.describe() < b.plan.describe();
}

std::vector<ParallelPlan> enumerate_plans(const CostModel& model, const PlanLimits& limits,
                                          std::vector<RejectedRegion>& rejected) {
  const PlanningProblem& problem = model.problem();
  const int devices = problem.cluster.devices();
  Rejections reject(rejected);
  std::vector<ParallelPlan> plans;
  for (const auto& [name, fixed] :
       {std::pair{"dp", limits.dp}, {"tp", limits.tp}, {"pp", limits.pp}, {"ep", limits.ep}}) {
    if (fixed && devices % *fixed != 0) {
      reject.add(fmt::format("fixed degrees that do not divide the cluster's {} devices", devices),
                 [degree = name, value = *fixed] { return fmt::format("{}={}", degree, value); });
      return plans;
    }
  }
  const int fixed_ep = limits.ep.value_or(1);
  if (limits.dp && limits.tp && limits.pp && *limits.dp * *limits.tp * *limits.pp * fixed_ep != devices) {
    reject.add(fmt::format("fixed layouts whose dp x tp x pp x ep is not the cluster's {} devices", devices),
               [&] { return layout_name(*limits.dp, *limits.tp, *limits.pp, fixed_ep); });
    return plans;
  }
  if (limits.ep && *limits.ep > 1 && (problem.model.num_experts == 0 || problem.model.num_experts % *limits.ep != 0)) {
    reject.add(problem.model.num_experts == 0
                   ? std::string("expert parallelism for a model without experts")
                   : fmt::format("expert parallelism that does not divide the {} experts", problem.model.num_experts),
               [&] { return fmt::format("ep={}", *limits.ep); });
    return plans;
  }
  for (int ep : expert_degrees(problem.model, devices, limits)) {
    add_layouts(model, limits, ep, reject, plans);
  }
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
  std::map<std::tuple<int, int, int, int>, LayoutMemory> layouts;
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
    auto [entry, inserted] = layouts.try_emplace({plan.dp, plan.tp, plan.pp, plan.ep}, LayoutMemory{false, memory.peak});
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
      auto [dp, tp, pp, ep] = layout;
      region.details.push_back(fmt::format("{}: no variant fits; the least needs {:.1f} GiB per device",
                                           layout_name(dp, tp, pp, ep), memory.least_peak / kGiB));
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
