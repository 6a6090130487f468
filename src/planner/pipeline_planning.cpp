// Pipeline parallelism in the planner: every degree dividing the devices left, refused past one
// stage per layer; its schedules (GPipe, 1F1B, interleaved with 2 or more virtual stages while every
// chunk keeps a layer). Its stages, schedule and transfers are the cost model's structure (splits_layers).
#include <fmt/format.h>

#include "parallel/parallel_settings.h"
#include "planner/cost_model.h"
#include "planner/plan_dimension.h"
#include "planner/search.h"

namespace strata {

namespace {

template <typename T>
bool allowed(const std::optional<T>& fixed, const T& value) {
  return !fixed || *fixed == value;
}

std::optional<std::string> more_stages_than_layers(const PlanningProblem& problem, int degree) {
  if (degree <= problem.model.n_layer) return std::nullopt;
  return fmt::format("layouts with more pipeline stages than the {} layers", problem.model.n_layer);
}

// Why the plan's stages and schedule cannot run the model, or nothing.
std::optional<std::string> schedule_refused(const PlanningProblem& problem, const ParallelPlan& plan) {
  const int stages = plan.degree("pp");
  const int chunks = stages * plan.virtual_stages;
  if (chunks > problem.model.n_layer) {
    return fmt::format("{} pipeline chunks for {} layers (every chunk needs a layer)", chunks, problem.model.n_layer);
  }
  if (plan.schedule != PipelineSchedule::Interleaved) {
    if (plan.virtual_stages != 1) return std::string("virtual stages need the interleaved schedule");
    return std::nullopt;
  }
  if (stages < 2 || plan.virtual_stages < 2) return std::string("interleaving needs pp >= 2 and virtual stages >= 2");
  if (plan.micro_batches % stages != 0) {
    return fmt::format("interleaving needs micro-batches ({}) to be a multiple of pp ({})", plan.micro_batches, stages);
  }
  return std::nullopt;
}

void schedule_options(const ParallelPlan& plan, const OptionSearch& search, const EmitPlan& emit) {
  const PlanLimits& limits = search.limits;
  const int stages = plan.degree("pp");
  if (stages == 1) {  // no schedule to choose: the plan as it is
    if (allowed(limits.schedule, PipelineSchedule::OneFOneB) && allowed(limits.virtual_stages, 1)) emit(plan);
    return;
  }
  ParallelPlan option = plan;
  for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
    if (!allowed(limits.schedule, schedule) || !allowed(limits.virtual_stages, 1)) continue;
    option.schedule = schedule;
    emit(option);
  }
  if (!allowed(limits.schedule, PipelineSchedule::Interleaved)) return;
  option.schedule = PipelineSchedule::Interleaved;
  for (int v = 2; v <= limits.max_virtual_stages && stages * v <= search.problem.model.n_layer; ++v) {
    if (!allowed(limits.virtual_stages, v)) continue;
    option.virtual_stages = v;
    if (option.micro_batches % stages != 0) {
      search.reject("interleaved plans whose micro-batch count is not a multiple of pp", option);
      continue;
    }
    emit(option);
  }
}

PipelineSchedule configured_schedule(const ParallelSettings& settings) {
  return parse_schedule(settings.schedule, "key 'parallel.schedule'");
}

void read_schedule(const ParallelSettings& settings, ParallelPlan& plan) {
  plan.schedule = configured_schedule(settings);
  plan.virtual_stages = static_cast<int>(settings.virtual_stages);
}

void write_schedule(const ParallelPlan& plan, ParallelSettings& settings) {
  settings.schedule = std::string(schedule_name(plan.schedule));
  settings.virtual_stages = plan.virtual_stages;
}

void fix_schedule(const ParallelSettings& settings, PlanLimits& limits) {
  limits.schedule = configured_schedule(settings);
  limits.virtual_stages = static_cast<int>(settings.virtual_stages);
}

}  // namespace

PlannerDimension pipeline_planning() {
  return {.name = "pp",
          .parallelism = "pipeline",
          .fix_help = "Fix the pipeline-parallel degree",
          .bound_help = "Largest pipeline-parallel degree",
          .degrees = divisors_of_devices,
          .reject_layout = more_stages_than_layers,
          .refuse_plan = schedule_refused,
          .options = schedule_options,
          .read_settings = read_schedule,
          .write_settings = write_schedule,
          .fix_settings = fix_schedule,
          .comm_name = "pipeline transfers",
          .splits_layers = true};
}

}  // namespace strata
