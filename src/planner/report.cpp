#include "planner/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "parallel/parallel_dimension.h"
#include "planner/expert_work.h"
#include "planner/plan_dimension.h"

namespace strata {

namespace {

struct Component {
  std::string key;   // in JSON
  std::string name;  // in text
  double TimeBreakdown::*field = nullptr;
  // A dimension's term (where `field` is null): its seconds at `position` of `terms`.
  DimensionSeconds TimeBreakdown::*terms = nullptr;
  size_t position = 0;
  const ParallelDimension* dimension = nullptr;
  double of(const TimeBreakdown& time) const { return field != nullptr ? time.*field : (time.*terms).at(position); }
  // A dimension of some models only is left out of a plan's JSON at 1, as plans without it were recorded.
  bool recorded(const ParallelPlan& plan) const {
    return dimension == nullptr || !dimension->named_when_set_only || plan.degree(dimension->name) > 1;
  }
};

// The dimensions' time terms, innermost first, that are their communication in the stages' time (TimeBreakdown::comm)
// or the step's gradient reduction (TimeBreakdown::reduction): "tp_comm", "tensor-parallel collectives".
void add_dimension_terms(std::vector<Component>& components, bool reduction) {
  const std::vector<PlannerDimension> parts = planner_dimensions();
  for (size_t position : InnermostFirst()) {
    const ParallelDimension& dimension = planned_dimension_at(position);
    for (const PlannerDimension& part : parts) {
      if (part.name != dimension.name || part.comm_name.empty() || part.reduces_gradients != reduction) continue;
      components.push_back({part.name + "_comm", part.comm_name, nullptr,
                            reduction ? &TimeBreakdown::reduction : &TimeBreakdown::comm, position, &dimension});
    }
  }
}

// A step's terms in the order TimeBreakdown::total adds them.
std::vector<Component> components() {
  std::vector<Component> list = {{"compute", "compute", &TimeBreakdown::compute},
                                 {"recompute", "recomputation", &TimeBreakdown::recompute}};
  add_dimension_terms(list, false);
  list.insert(list.end(), {{"zero_comm", "ZeRO collectives", &TimeBreakdown::zero_comm},
                           {"grad_accumulation", "gradient accumulation", &TimeBreakdown::grad_accumulation},
                           {"bubble", "pipeline bubble", &TimeBreakdown::bubble}});
  add_dimension_terms(list, true);
  list.insert(list.end(),
              {{"overlap_slowdown", "compute slowed by collectives beside it", &TimeBreakdown::overlap_slowdown},
               {"fsdp_copies", "FSDP's copies around its collectives", &TimeBreakdown::fsdp_copies},
               {"param_gather", "weight all-gather", &TimeBreakdown::param_gather},
               {"optimizer", "optimizer", &TimeBreakdown::optimizer}});
  return list;
}

std::string rate_text(double per_second) {
  if (per_second >= 1e6) return fmt::format("{:.2f}M", per_second / 1e6);
  if (per_second >= 1e3) return fmt::format("{:.1f}k", per_second / 1e3);
  return fmt::format("{:.1f}", per_second);
}

std::string breakdown_text(const TimeBreakdown& time) {
  std::string text;
  for (const Component& c : components()) {
    double value = c.of(time);
    if (value <= 0) continue;
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", c.name, seconds_text(value));
  }
  return text;
}

std::string split_text(const std::vector<int>& layers) {
  std::string text;
  for (int count : layers) text += fmt::format("{}{}", text.empty() ? "" : "/", count);
  return text;
}

std::vector<double> stage_peaks(const Prediction& prediction) {
  std::vector<double> peaks;
  for (const MemoryBreakdown& stage : prediction.stages) peaks.push_back(stage.peak);
  return peaks;
}

// "[1.204, 1.391] s" in the unit of the upper end.
std::string interval_text(const StepInterval& interval) {
  const std::string high = seconds_text(interval.high_s);
  const std::string unit = high.substr(high.find(' '));
  const double scale = unit == " s" ? 1.0 : unit == " ms" ? 1e3 : 1e6;
  return fmt::format("[{:.{}f}, {}]{}", interval.low_s * scale, unit == " s" ? 3 : unit == " ms" ? 2 : 1,
                     high.substr(0, high.find(' ')), unit);
}

std::string uncertainty_text(const StepIntervals& intervals) {
  if (intervals.figures.empty()) {
    return "step-time intervals: every figure that prices time is measured or the vendor's specification; the cost "
           "model's own error (bench/planner/validate.sh) is not included\n";
  }
  std::string names;
  for (const UncertainFigure& f : intervals.figures) names += (names.empty() ? "" : ", ") + f.figure;
  return fmt::format(
      "step-time intervals: {} assumed figure(s) each {:.0f}% worse and better (--figure-uncertainty), the "
      "changes added: {}; measured and datasheet figures held; the cost model's own error (bench/planner/validate.sh) "
      "is not included\n",
      intervals.figures.size(), 100 * intervals.range, names);
}

// Whether ranked plan `i` lies within the winner's interval (the ranking between them is not certain).
nlohmann::json uncertainty_json(const StepIntervals& intervals) {
  nlohmann::json figures = nlohmann::json::array();
  for (const UncertainFigure& f : intervals.figures) figures.push_back({{"figure", f.figure}, {"keys", f.keys}});
  return {{"range", intervals.range},
          {"combination", "sum of each assumed figure's change (worst case)"},
          {"assumed_figures", figures}};
}

bool within_winner(const StepIntervals* intervals, size_t i) {
  return intervals != nullptr && i < intervals->plans.size() &&
         intervals_overlap(intervals->plans.front(), intervals->plans[i]);
}

}  // namespace

std::string seconds_text(double seconds) {
  double magnitude = std::fabs(seconds);
  if (magnitude >= 1.0) return fmt::format("{:.3f} s", seconds);
  if (magnitude >= 1e-3) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.1f} us", seconds * 1e6);
}

std::vector<std::string> explain_difference(const Prediction& winner, const Prediction& other) {
  std::vector<std::pair<double, std::string>> deltas;
  for (const Component& c : components()) {
    double delta = c.of(other.time) - c.of(winner.time);
    if (std::fabs(delta) < 1e-6 * winner.step_s) continue;
    deltas.emplace_back(delta, fmt::format("{}{} {}", delta > 0 ? "+" : "-", seconds_text(std::fabs(delta)), c.name));
  }
  std::stable_sort(deltas.begin(), deltas.end(),
                   [](const auto& a, const auto& b) { return std::fabs(a.first) > std::fabs(b.first); });
  std::vector<std::string> phrases;
  for (size_t i = 0; i < deltas.size() && i < 3; ++i) phrases.push_back(deltas[i].second);
  return phrases;
}

nlohmann::json plan_json(const ParallelPlan& plan) {
  nlohmann::json json = {{"micro_batch", plan.micro_batch},
                         {"micro_batches", plan.micro_batches},
                         {"zero", plan.zero},
                         {"recompute", std::string(recompute_mode_name(plan.recompute))},
                         {"description", plan.describe()}};
  for (const PlannerDimension& part : planner_dimensions()) {
    if (part.options_json) part.options_json(plan, json);
  }
  for (const PlannedDimension& planned : planned_dimensions()) {
    const ParallelDimension& dimension = *planned.dimension;
    // A dimension of some models only is absent at 1 (ep), as plans without it were recorded.
    const int degree = plan.degree(dimension.name);
    if (!dimension.named_when_set_only || degree > 1) json[dimension.name] = degree;
  }
  if (const std::optional<std::string> note = not_run_by_strata(plan)) json["not_run_by_strata"] = *note;
  return json;
}

nlohmann::json prediction_json(const Prediction& prediction) {
  nlohmann::json time;
  for (const Component& c : components()) {
    if (c.recorded(prediction.plan)) time[c.key] = c.of(prediction.time);
  }
  const MemoryBreakdown& m = prediction.memory;
  return {{"plan", plan_json(prediction.plan)},
          {"step_s", prediction.step_s},
          {"tokens_per_s", prediction.tokens_per_s},
          {"mfu", prediction.mfu},
          {"hardware_flops", prediction.hardware_flops},
          {"layers_per_stage", prediction.layers_per_stage},
          {"stage_peak_bytes", stage_peaks(prediction)},
          {"time_s", time},
          {"pipeline_timing", prediction.schedule_replayed ? "schedule replayed" : "closed form"},
          {"memory_bytes",
           {{"stage", m.stage},
            {"weights", m.weights},
            {"master_weights", m.master},
            {"gradients", m.gradients},
            {"optimizer", m.optimizer},
            {"activations", m.activations},
            {"gradient_staging", m.staging},
            {"zero_buffers", m.buffers},
            {"peak", m.peak},
            {"capacity", m.capacity}}}};
}

nlohmann::json problem_json(const PlanningProblem& problem) {
  const ModelConfig& c = problem.model;
  nlohmann::json json = {{"model",
           {{"name", problem.model_name},
            {"family", c.family},
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"n_embd", c.n_embd},
            {"vocab_size", c.vocab_size},
            {"block_size", c.block_size},
            {"parameters", c.num_parameters()}}},
          {"global_batch", problem.global_batch},
          {"seq", problem.seq},
          {"dtype", std::string(dtype_name(problem.dtype))},
          {"cluster",
           {{"name", problem.cluster.name},
            {"source", problem.cluster.source},
            {"nodes", problem.cluster.nodes},
            {"devices_per_node", problem.cluster.devices_per_node},
            {"device", problem.cluster.device.name}}}};
  if (problem.fp8 != Fp8Recipe::None) {
    json["fp8_linears"] = {{"recipe", fp8_recipe_name(problem.fp8)}, {"weights_gathered_in_fp8", problem.fp8_gather}};
  }
  if (c.num_experts > 0) {
    json["model"]["experts"] = c.num_experts;
    json["model"]["experts_per_token"] = c.num_experts_per_tok;
    json["model"]["active_parameters"] = active_parameters(c);
    json["moe_imbalance"] = problem.moe_imbalance;
  }
  return json;
}

std::string format_report(const CostModel& model, const SearchResult& result, size_t top,
                          const StepIntervals* intervals) {
  const PlanningProblem& problem = model.problem();
  const ModelConfig& c = problem.model;
  std::string out;
  out += fmt::format("model {} ({}): {} layers, width {}, {} heads, vocab {}, {:.1f}M parameters\n",
                     problem.model_name, c.family, c.n_layer, c.n_embd, c.n_head, c.vocab_size,
                     static_cast<double>(c.num_parameters()) / 1e6);
  if (c.num_experts > 0) {
    out += fmt::format(
        "experts: {} per layer, {} per token: {:.1f}M parameters active (MFU counts these); imbalance {:.2f} (the "
        "busiest expert's tokens over the mean)\n",
        c.num_experts, c.num_experts_per_tok, active_parameters(c) / 1e6, problem.moe_imbalance);
  }
  const std::string fp8 =
      problem.fp8 == Fp8Recipe::None
          ? ""
          : fmt::format(", the layers' linears in float8 ({} scaling{}; MFU against the {} peak)",
                        fp8_recipe_name(problem.fp8), problem.fp8_gather ? ", weights gathered in fp8" : "",
                        dtype_name(problem.dtype));
  out += fmt::format("step: {} rows x {} tokens in {}{}; {:.3g} model FLOPs (forward + backward, no recomputation)\n",
                     problem.global_batch, problem.seq, dtype_name(problem.dtype), fp8, model.model_flops_per_step());
  out += fmt::format("cluster {}: {} node(s) x {} {} ({:.1f} GiB usable each)\n", problem.cluster.name,
                     problem.cluster.nodes, problem.cluster.devices_per_node, problem.cluster.device.name,
                     problem.cluster.device.usable_memory_bytes() / kGiB);
  out += fmt::format("searched {} plans in {:.3f} s; {} fit in memory\n\n", result.candidates, result.search_s,
                     result.feasible);
  if (result.ranked.empty()) {
    out += "no plan fits\n";
  } else {
    out += fmt::format("{:>3}  {:<62} {:>11}{} {:>9} {:>6} {:>10}\n", "#", "plan", "step",
                       intervals ? fmt::format(" {:<22}", "interval") : "", "tokens/s", "MFU", "mem/device");
    for (size_t i = 0; i < result.ranked.size() && i < top; ++i) {
      const Prediction& p = result.ranked[i];
      out += fmt::format("{:>3}  {:<62} {:>11}{} {:>9} {:>5.1f}% {:>6.1f} GiB\n", i + 1, p.plan.describe(),
                         seconds_text(p.step_s),
                         intervals ? fmt::format(" {:<22}", interval_text(intervals->plans.at(i))) : "",
                         rate_text(p.tokens_per_s), 100 * p.mfu, p.memory.peak / kGiB);
    }
    if (intervals) out += uncertainty_text(*intervals);
    const Prediction& winner = result.ranked.front();
    const MemoryBreakdown& m = winner.memory;
    out += fmt::format("\nwinner: {}\n", winner.plan.describe());
    if (const std::optional<std::string> note = not_run_by_strata(winner.plan)) out += fmt::format("  {}\n", *note);
    out += fmt::format("  layers per stage: {}{}\n", split_text(winner.layers_per_stage),
                       winner.layers_per_stage.size() > 1 && winner.schedule_replayed
                           ? " (step time: every stage's schedule replayed)"
                           : "");
    if (winner.stages.size() > 1) {
      std::string peaks;
      for (const MemoryBreakdown& stage : winner.stages)
        peaks += fmt::format("{}{:.1f}", peaks.empty() ? "" : "/", stage.peak / kGiB);
      out += fmt::format("  peak memory per stage: {} GiB\n", peaks);
    }
    out += fmt::format("  time: {}\n", breakdown_text(winner.time));
    out += fmt::format(
        "  memory (stage {}): weights {:.2f} GiB, master {:.2f}, gradients {:.2f}, optimizer {:.2f}, "
        "activations {:.2f}, gradient staging {:.2f}, ZeRO buffers {:.2f}; peak {:.2f} of {:.2f} GiB\n",
        m.stage, m.weights / kGiB, m.master / kGiB, m.gradients / kGiB, m.optimizer / kGiB, m.activations / kGiB,
        m.staging / kGiB, m.buffers / kGiB, m.peak / kGiB, m.capacity / kGiB);
    if (result.ranked.size() > 1) out += "why the runners-up lose:\n";
    for (size_t i = 1; i < result.ranked.size() && i < top; ++i) {
      const Prediction& other = result.ranked[i];
      std::string reasons;
      for (const std::string& phrase : explain_difference(winner, other)) {
        reasons += (reasons.empty() ? "" : "; ") + phrase;
      }
      out += fmt::format("  {:>2}. +{:.1f}% ({}): {}\n", i + 1, 100 * (other.step_s / winner.step_s - 1),
                         other.plan.describe(), reasons.empty() ? "the same prediction; later in plan order" : reasons);
      if (within_winner(intervals, i)) {
        out += fmt::format(
            "      this plan and the winner are within each other's intervals: the ranking between them is not "
            "certain{}\n",
            order_holds(*intervals, result.ranked, i)
                ? fmt::format(" (though the assumed figures, erring together, close the gap of {} by at most {})",
                              seconds_text(other.step_s - winner.step_s), seconds_text(intervals->gap_closing_s[i]))
                : " (the assumed figures, erring together, can reverse it)");
      }
    }
  }
  if (!result.rejected.empty()) out += "rejected:\n";
  for (const RejectedRegion& region : result.rejected) {
    out += fmt::format("  {} {} (e.g. {})\n", region.count, region.reason, region.example);
    for (size_t i = 0; i < region.details.size() && i < 8; ++i) out += fmt::format("      {}\n", region.details[i]);
    if (region.details.size() > 8) out += fmt::format("      ... and {} more\n", region.details.size() - 8);
  }
  return out;
}

nlohmann::json report_json(const CostModel& model, const SearchResult& result, size_t top,
                           const StepIntervals* intervals) {
  nlohmann::json report = problem_json(model.problem());
  report["model_flops_per_step"] = model.model_flops_per_step();
  report["candidates"] = result.candidates;
  report["feasible"] = result.feasible;
  report["search_s"] = result.search_s;
  nlohmann::json plans = nlohmann::json::array();
  for (size_t i = 0; i < result.ranked.size() && i < top; ++i) {
    nlohmann::json entry = prediction_json(result.ranked[i]);
    if (i > 0) entry["loses_by"] = explain_difference(result.ranked.front(), result.ranked[i]);
    if (intervals) {
      entry["step_time_low_s"] = intervals->plans.at(i).low_s;
      entry["step_time_high_s"] = intervals->plans.at(i).high_s;
      if (i > 0) {
        entry["within_winner_interval"] = within_winner(intervals, i);
        entry["order_holds_against_assumed_figures"] = order_holds(*intervals, result.ranked, i);
      }
    }
    plans.push_back(std::move(entry));
  }
  report["plans"] = std::move(plans);
  if (intervals) report["uncertainty"] = uncertainty_json(*intervals);
  nlohmann::json rejected = nlohmann::json::array();
  for (const RejectedRegion& region : result.rejected) {
    rejected.push_back(
        {{"reason", region.reason}, {"count", region.count}, {"example", region.example}, {"details", region.details}});
  }
  report["rejected"] = std::move(rejected);
  return report;
}

}  // namespace strata
