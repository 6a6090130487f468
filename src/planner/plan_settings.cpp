#include "planner/plan_settings.h"

#include "planner/plan_dimension.h"

namespace strata {

ParallelPlan plan_of_settings(const ParallelSettings& settings, const MeshShape& mesh) {
  ParallelPlan plan;
  plan.degrees = degrees_of(mesh);
  for (const PlannerDimension& part : planner_dimensions()) {
    if (!part.runtime_executes) continue;  // no setting of the runtime's: degree 1
    if (part.read_settings) part.read_settings(settings, plan);
  }
  return plan;
}

void write_plan_settings(const ParallelPlan& plan, ParallelSettings& settings) {
  for (const PlannerDimension& part : planner_dimensions()) {
    if (!part.runtime_executes) continue;  // the search never proposes it for the trainer
    settings.set_degree(part.name, plan.degree(part.name));
    if (part.write_settings) part.write_settings(plan, settings);
  }
}

void fix_to_settings(const ParallelSettings& settings, const MeshShape& mesh, PlanLimits& limits) {
  limits.fixed = degrees_of(mesh);
  for (const PlannerDimension& part : planner_dimensions()) {
    if (!part.runtime_executes) continue;
    if (part.fix_settings) part.fix_settings(settings, limits);
  }
}

}  // namespace strata
