// Pipeline parallelism in the planner: every degree dividing the devices left, refused past one
// stage per layer; its schedules (GPipe, 1F1B, interleaved with 2 or more virtual stages while every
// chunk keeps a layer). Its stages, schedule and transfers are the cost model's structure (splits_layers).
#include <fmt/format.h>

#include <charconv>

#include "core/error.h"

#include "parallel/parallel_settings.h"
#include "planner/cost_model.h"
#include "planner/plan_dimension.h"
#include "planner/search.h"

namespace strata {

namespace {

// Where its options are held in a plan (DimensionOptionValues), each 0 at its default: the schedule (by its
// place in kSchedules) and the model chunks per device less one.
size_t position() {
  static const size_t pipeline = dimension_position("pp");  // a built-in's position never changes
  return pipeline;
}
constexpr size_t kSchedule = 0, kExtraChunks = 1;
constexpr PipelineSchedule kSchedules[] = {PipelineSchedule::OneFOneB, PipelineSchedule::GPipe,
                                           PipelineSchedule::Interleaved};
constexpr int kMaxVirtualStages = 8;  // the most model chunks per device the search tries

int schedule_index(PipelineSchedule schedule) {
  for (int index = 0; index < 3; ++index) {
    if (kSchedules[index] == schedule) return index;
  }
  fail("unknown pipeline schedule");
}

template <typename T>
bool allowed(const std::optional<T>& fixed, const T& value) {
  return !fixed || *fixed == value;
}

std::optional<std::string> more_stages_than_layers(const PlanningProblem& problem, int degree) {
  if (degree <= problem.model.n_layer) return std::nullopt;
  return fmt::format("layouts with more pipeline stages than the {} layers", problem.model.n_layer);
}

// Why `stages` of `chunks_per_stage` model chunks under `schedule` cannot run the model, or nothing.
std::optional<std::string> chunks_refused(const PlanningProblem& problem, int stages, int chunks_per_stage,
                                          PipelineSchedule schedule) {
  const int chunks = stages * chunks_per_stage;
  if (chunks > problem.model.n_layer) {
    return fmt::format("{} pipeline chunks for {} layers (every chunk needs a layer)", chunks, problem.model.n_layer);
  }
  if (schedule != PipelineSchedule::Interleaved) {
    if (chunks_per_stage != 1) return std::string("virtual stages need the interleaved schedule");
    return std::nullopt;
  }
  if (stages < 2 || chunks_per_stage < 2) return std::string("interleaving needs pp >= 2 and virtual stages >= 2");
  return std::nullopt;
}

// Why the plan's stages and schedule cannot run the model, or nothing.
std::optional<std::string> schedule_refused(const PlanningProblem& problem, const ParallelPlan& plan) {
  const int stages = plan.degree("pp");
  const PipelineSchedule schedule = pipeline_schedule(plan);
  if (auto why = chunks_refused(problem, stages, virtual_stages(plan), schedule)) return why;
  if (schedule == PipelineSchedule::Interleaved && plan.micro_batches % stages != 0) {
    return fmt::format("interleaving needs micro-batches ({}) to be a multiple of pp ({})", plan.micro_batches, stages);
  }
  return std::nullopt;
}

// The interleaved schedule's chunk counts to try: a fixed one as given (the search's own range stops at
// kMaxVirtualStages and at one layer per chunk; a fixed count past either is tried, or refused with its reason).
std::vector<int> chunk_counts(const std::optional<int>& fixed_chunks, int stages, int layers) {
  if (fixed_chunks) return {*fixed_chunks};
  std::vector<int> counts;
  for (int v = 2; v <= kMaxVirtualStages && stages * v <= layers; ++v) counts.push_back(v);
  return counts;
}

void interleaved_options(ParallelPlan option, const OptionSearch& search, const EmitPlan& emit) {
  const std::optional<int> fixed_chunks = fixed_virtual_stages(search.limits);
  const int stages = option.degree("pp"), layers = static_cast<int>(search.problem.model.n_layer);
  set_pipeline_schedule(option, PipelineSchedule::Interleaved);
  for (int v : chunk_counts(fixed_chunks, stages, layers)) {
    set_virtual_stages(option, v);
    if (auto why = chunks_refused(search.problem, stages, v, PipelineSchedule::Interleaved)) {
      search.reject("plans whose fixed virtual stages cannot run: " + *why, option);  // the search's own range runs
    } else if (option.micro_batches % stages != 0) {
      search.reject("interleaved plans whose micro-batch count is not a multiple of pp", option);
    } else {
      emit(option);
    }
  }
}

void schedule_options(const ParallelPlan& plan, const OptionSearch& search, const EmitPlan& emit) {
  const std::optional<PipelineSchedule> fixed = fixed_pipeline_schedule(search.limits);
  const std::optional<int> fixed_chunks = fixed_virtual_stages(search.limits);
  if (plan.degree("pp") == 1) {  // no schedule to choose: the plan as it is
    if (allowed(fixed, PipelineSchedule::OneFOneB) && allowed(fixed_chunks, 1)) {
      emit(plan);
    } else {
      search.reject("plans of one pipeline stage with a schedule or virtual stages fixed", plan);
    }
    return;
  }
  ParallelPlan option = plan;
  for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
    if (!allowed(fixed, schedule)) continue;
    set_pipeline_schedule(option, schedule);
    if (allowed(fixed_chunks, 1)) {
      emit(option);
    } else if (fixed) {  // the user fixed both: say why nothing runs (unfixed, the interleaved plans take them)
      search.reject("plans whose fixed virtual stages cannot run: " +
                        *chunks_refused(search.problem, option.degree("pp"), *fixed_chunks, schedule),
                    option);
    }
  }
  // Virtual stages fixed at 1 with the schedule free: the plans above are the ones asked for.
  const bool interleaving_asked = fixed || !fixed_chunks || *fixed_chunks >= 2;
  if (allowed(fixed, PipelineSchedule::Interleaved) && interleaving_asked) interleaved_options(option, search, emit);
}

PipelineSchedule configured_schedule(const ParallelSettings& settings) {
  return parse_schedule(settings.schedule, "key 'parallel.schedule'");
}

void read_schedule(const ParallelSettings& settings, ParallelPlan& plan) {
  set_pipeline_schedule(plan, configured_schedule(settings));
  set_virtual_stages(plan, static_cast<int>(settings.virtual_stages));
}

void write_schedule(const ParallelPlan& plan, ParallelSettings& settings) {
  settings.schedule = std::string(schedule_name(pipeline_schedule(plan)));
  settings.virtual_stages = virtual_stages(plan);
}

void fix_schedule(const ParallelSettings& settings, PlanLimits& limits) {
  fix_pipeline_schedule(limits, configured_schedule(settings));
  fix_virtual_stages(limits, static_cast<int>(settings.virtual_stages));
}

// " 1f1b", " interleaved v=2": the schedule, which has no effect on one stage.
std::string describe_schedule(const ParallelPlan& plan) {
  if (plan.degree("pp") == 1) return "";
  const PipelineSchedule schedule = pipeline_schedule(plan);
  std::string text(schedule_name(schedule));
  if (schedule == PipelineSchedule::Interleaved) text += fmt::format(" v={}", virtual_stages(plan));
  return text;
}

void schedule_json(const ParallelPlan& plan, nlohmann::json& json) {
  json["schedule"] = std::string(schedule_name(pipeline_schedule(plan)));
  json["virtual_stages"] = virtual_stages(plan);
}

void fix_virtual_stages_flag(const std::string& value, PlanLimits& limits) {
  int chunks = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), chunks);
  if (error != std::errc() || end != value.data() + value.size() || chunks < 1) {
    fail("--virtual-stages must be a positive integer, got '{}'", value);
  }
  fix_virtual_stages(limits, chunks);
}

}  // namespace

PipelineSchedule pipeline_schedule(const ParallelPlan& plan) { return kSchedules[plan.options.at(position(), kSchedule)]; }

void set_pipeline_schedule(ParallelPlan& plan, PipelineSchedule schedule) {
  plan.options.set_at(position(), kSchedule, schedule_index(schedule));
}

int virtual_stages(const ParallelPlan& plan) { return plan.options.at(position(), kExtraChunks) + 1; }

void set_virtual_stages(ParallelPlan& plan, int chunks) { plan.options.set_at(position(), kExtraChunks, chunks - 1); }

std::optional<PipelineSchedule> fixed_pipeline_schedule(const PlanLimits& limits) {
  const int fixed = limits.fixed_options.at(position(), kSchedule);
  if (fixed == DimensionOptionValues::kOpen) return std::nullopt;
  return kSchedules[fixed];
}

void fix_pipeline_schedule(PlanLimits& limits, PipelineSchedule schedule) {
  limits.fixed_options.set_at(position(), kSchedule, schedule_index(schedule));
}

std::optional<int> fixed_virtual_stages(const PlanLimits& limits) {
  const int fixed = limits.fixed_options.at(position(), kExtraChunks);
  if (fixed == DimensionOptionValues::kOpen) return std::nullopt;
  return fixed + 1;
}

void fix_virtual_stages(PlanLimits& limits, int chunks) {
  limits.fixed_options.set_at(position(), kExtraChunks, chunks - 1);
}

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
          .describe_options = describe_schedule,
          .options_described_last = true,
          .options_json = schedule_json,
          .option_flags = {{"schedule", "Fix the pipeline schedule: gpipe, 1f1b or interleaved",
                            [](const std::string& value, PlanLimits& limits) {
                              fix_pipeline_schedule(limits, parse_schedule(value, "--schedule"));
                            }},
                           {"virtual-stages", "Fix the model chunks per device (interleaved)",
                            fix_virtual_stages_flag}},
          .comm_name = "pipeline transfers",
          .splits_layers = true,
          .stage_schedule = [](const ParallelPlan& plan) {
            return StageSchedule{pipeline_schedule(plan), virtual_stages(plan)};
          }};
}

}  // namespace strata
