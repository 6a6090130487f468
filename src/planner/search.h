#pragma once
// The search over parallel layouts: every factorisation of the devices over the
// registered dimensions (each dimension's degrees from its planner part,
// plan_dimension.h: for data x tensor x pipeline x expert parallelism, ep the
// divisors of a mixture of experts' expert count, 1 for a dense model), micro-batch
// size (its count follows from the global batch), ZeRO stage, recomputation and
// the dimensions' options (sequence parallelism, pipeline schedule with virtual
// stages), within the user's limits. Every
// candidate is priced by the cost model; the ranking is by predicted step
// time with ties broken by the plan's description, so the result does not
// depend on the order candidates are produced in.
#include <optional>
#include <string>
#include <vector>

#include "planner/cost_model.h"

namespace strata {

// What the user fixes or bounds (unset: open). A plan with every field fixed
// is evaluated alone.
struct PlanLimits {
  DimensionDegrees fixed{0};    // per dimension, its degree (0: open)
  DimensionDegrees largest{0};  // per dimension, its largest degree (0: no bound)
  // Per dimension, its options fixed (kOpen: open), through its part's accessors (plan_dimension.h).
  DimensionOptionValues fixed_options{DimensionOptionValues::kOpen};
  std::optional<int64_t> micro_batch;
  int64_t max_micro_batch = 32;
  std::optional<int> zero;
  std::optional<RecomputeMode> recompute;
};

// A family of plans that cannot run, and why.
struct RejectedRegion {
  std::string reason;  // says what was counted: layouts or plans
  int64_t count = 0;
  std::string example;               // one plan (or layout) of the region
  std::vector<std::string> details;  // e.g. per layout, the least memory any variant needs
};

struct SearchResult {
  std::vector<Prediction> ranked;  // feasible plans, best first, at most `keep`
  std::vector<RejectedRegion> rejected;
  int64_t candidates = 0;  // plans the cost model placed (memory); their time is priced when they fit
  int64_t feasible = 0;    // of those, the ones that fit in memory
  double search_s = 0;     // wall time of enumeration and pricing
};

// True when `a` ranks before `b`.
bool ranks_before(const Prediction& a, const Prediction& b);

// The candidates within `limits`, in a fixed order; plans that cannot run for
// structural reasons are counted into `rejected` instead.
std::vector<ParallelPlan> enumerate_plans(const CostModel& model, const PlanLimits& limits,
                                          std::vector<RejectedRegion>& rejected);

// Prices `candidates` and keeps the best `keep` that fit: ranked by the
// closed-form pipeline time, then the best `keep` + 16 again with their
// schedules replayed (CostModel::PipelineTiming), which gives the order and
// the figures reported.
SearchResult rank_plans(CostModel& model, const std::vector<ParallelPlan>& candidates, size_t keep);

SearchResult search_plans(CostModel& model, const PlanLimits& limits, size_t keep);

}  // namespace strata
