#include "report/report_document.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/json_file.h"
#include "core/median.h"
#include "report/config_diff.h"
#include "report/decimate.h"

namespace strata {

namespace {

struct PlotKind {
  const char* field;  // in metrics.jsonl
  const char* title;
  const char* y_label;
  const char* y_scale;      // "linear" or "log2"
  const char* when_absent;  // shown when no run recorded the field; nullptr: leave the plot out
};

// The six plots always appear (saying why one is empty); the others when some run has them.
constexpr PlotKind kPlots[] = {
    {"loss", "Training loss", "loss (mean over the step's micro-batches)", "linear", "no steps recorded"},
    {"val_loss", "Validation loss", "loss on the validation batches", "linear",
     "no run validated (train.val_every = 0)"},
    {"lr", "Learning rate", "learning rate", "linear", "no learning rate recorded"},
    {"grad_norm", "Gradient norm", "global L2 norm, before clipping", "linear", "no gradient norm recorded"},
    {"tokens_per_s", "Throughput", "tokens/s (every rank)", "linear", "no throughput recorded"},
    {"loss_scale", "Loss scale", "fp16 loss scale", "log2",
     "no run used dynamic loss scaling (only precision.compute = f16 does)"},
    {"mfu", "Model FLOPs utilisation", "MFU (fraction of the cluster file's peak)", "linear", nullptr},
    {"comm_wait_s", "Exposed data-parallel communication", "seconds per step waiting for gradient sums", "linear",
     nullptr},
    {"pipeline_wait_s", "Pipeline wait", "seconds per step the first stage waited", "linear", nullptr},
    // Mixture-of-experts runs: the router's losses (unweighted) and how evenly it spread the assignments.
    {"router_aux_loss", "Router load-balancing loss", "balance loss (unweighted; k when perfectly balanced)", "linear",
     nullptr},
    {"router_z_loss", "Router z-loss", "z-loss (unweighted)", "linear", nullptr},
    {"expert_tokens_max", "Busiest expert", "assignments to the busiest expert per step (all MoE layers)", "linear",
     nullptr},
    {"expert_tokens_min", "Idlest expert", "assignments to the idlest expert per step (all MoE layers)", "linear",
     nullptr},
    {"expert_tokens_dropped", "Dropped assignments", "assignments over an expert's capacity per step", "linear",
     nullptr},
};

nlohmann::json numbers_or_null(const std::vector<double>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (double value : values) out.push_back(std::isfinite(value) ? nlohmann::json(value) : nlohmann::json());
  return out;
}

nlohmann::json plots(const std::vector<RunRecord>& runs) {
  nlohmann::json out = nlohmann::json::array();
  for (const PlotKind& kind : kPlots) {
    nlohmann::json series = nlohmann::json::array();
    for (size_t run = 0; run < runs.size(); ++run) {
      auto found = runs[run].metrics.find(kind.field);
      if (found == runs[run].metrics.end()) continue;
      const MetricSeries drawn = thin_for_drawing(found->second);
      nlohmann::json line{{"run", run}, {"steps", drawn.steps}, {"values", numbers_or_null(drawn.values)}};
      if (drawn.steps.size() < found->second.steps.size()) line["thinned_from"] = found->second.steps.size();
      series.push_back(std::move(line));
    }
    if (series.empty() && kind.when_absent == nullptr) continue;
    nlohmann::json plot{{"id", kind.field},       {"title", kind.title},   {"y_label", kind.y_label},
                        {"y_scale", kind.y_scale}, {"series", series}};
    if (series.empty()) plot["note"] = kind.when_absent;
    out.push_back(std::move(plot));
  }
  return out;
}

// A TOML string's text without its quotes; other values as written.
std::string config_value(const RunRecord& run, const std::string& key) {
  auto found = run.config.find(key);
  if (found == run.config.end()) return "?";
  const std::string& text = found->second;
  const bool quoted = text.size() >= 2 && (text.front() == '\'' || text.front() == '"') && text.back() == text.front();
  return quoted ? text.substr(1, text.size() - 2) : text;
}

std::optional<double> last_finite(const RunRecord& run, const std::string& field) {
  auto found = run.metrics.find(field);
  if (found == run.metrics.end()) return std::nullopt;
  for (auto value = found->second.values.rbegin(); value != found->second.values.rend(); ++value) {
    if (std::isfinite(*value)) return *value;
  }
  return std::nullopt;
}

std::optional<double> lowest(const RunRecord& run, const std::string& field) {
  auto found = run.metrics.find(field);
  if (found == run.metrics.end()) return std::nullopt;
  std::optional<double> best;
  for (double value : found->second.values) {
    if (std::isfinite(value) && (!best || value < *best)) best = value;
  }
  return best;
}

// As strata train reports its step time: the median after the first recorded step.
std::optional<double> median_throughput(const RunRecord& run) {
  auto found = run.metrics.find("tokens_per_s");
  if (found == run.metrics.end()) return std::nullopt;
  std::vector<double> values = found->second.values;
  std::erase_if(values, [](double value) { return !std::isfinite(value); });  // null in an untrusted file
  if (values.size() <= 1) return values.empty() ? std::nullopt : std::optional(values.front());
  return median_after_first(values);
}

std::string figure(const std::optional<double>& value, const char* format = "{:.4f}") {
  return value ? fmt::format(fmt::runtime(format), *value) : "—";
}

// As json_fields.h names a file: quoted.
std::string plan_source(const RunRecord& run) { return fmt::format("'{}'", (run.dir / "plan.json").string()); }
std::string ops_source(const RunRecord& run) { return fmt::format("'{}'", (run.dir / "ops.json").string()); }

std::string plan_description(const RunRecord& run) {
  if (!run.plan) return "—";
  const std::string where = plan_source(run);
  const nlohmann::json& chosen = json_required(*run.plan, "chosen", where);
  return json_string(json_required(chosen, "plan", json_member(where, "chosen")), "description",
                     json_member(where, "chosen.plan"));
}

nlohmann::json summary(const RunRecord& run) {
  const std::string model = fmt::format(
      "{}: {} layers, {} heads, width {}, context {}, vocabulary {}", config_value(run, "model.family"),
      config_value(run, "model.n_layer"), config_value(run, "model.n_head"), config_value(run, "model.n_embd"),
      config_value(run, "model.block_size"), config_value(run, "model.vocab_size"));
  const std::optional<double> tokens = last_finite(run, "tokens");
  return nlohmann::json::array({
      {"model", model},
      {"backend, precision", config_value(run, "ops.backend") + ", " + config_value(run, "precision.compute")},
      {"global batch", config_value(run, "train.global_batch") + " rows"},
      {"layout", plan_description(run)},
      {"steps recorded", fmt::format("{} of {}", run.last_step(), config_value(run, "train.steps"))},
      {"last training loss", figure(last_finite(run, "loss"))},
      {"last / best validation loss",
       figure(last_finite(run, "val_loss")) + " / " + figure(lowest(run, "val_loss"))},
      {"tokens/s (median after the first step)", figure(median_throughput(run), "{:.0f}")},
      {"tokens seen", figure(tokens, "{:.0f}")},
      {"skipped steps (inf/nan gradients)", std::to_string(run.skipped_steps.size())},
  });
}

nlohmann::json planner_entry(const RunRecord& run) {
  if (!run.plan) return {{"missing", "no plan.json (a run of an older Strata)"}};
  const std::string where = plan_source(run);
  const nlohmann::json& chosen = json_required(*run.plan, "chosen", where);
  const std::string chosen_where = json_member(where, "chosen");
  nlohmann::json entry{{"plan", plan_description(run)},
                       {"cluster", run.plan->contains("cluster") ? json_string(*run.plan, "cluster", where) : ""}};
  if (chosen.contains("step_s")) {
    entry["predicted_s"] = json_number(chosen, "step_s", chosen_where);
    nlohmann::json terms = nlohmann::json::array();
    const nlohmann::json& time_s = json_required(chosen, "time_s", chosen_where);
    expect_json_object(time_s, json_member(chosen_where, "time_s"));
    for (const auto& [term, seconds] : time_s.items()) {
      const double value = json_number(time_s, term, json_member(chosen_where, "time_s"));
      if (value != 0) terms.push_back({term, value});
    }
    entry["terms"] = terms;
  }
  if (run.plan->contains("measured")) {
    const nlohmann::json& measured = (*run.plan)["measured"];
    const std::string measured_where = json_member(where, "measured");
    entry["measured_s"] = json_number(measured, "step_s", measured_where);
    entry["measured_steps"] = json_number(measured, "steps", measured_where);
  }
  return entry;
}

nlohmann::json ops_rows(const nlohmann::json& rows, const std::string& where, const std::vector<std::string>& texts,
                        const std::vector<std::string>& numbers) {
  if (!rows.is_array()) fail("{} is {}, expected an array", where, json_excerpt(rows));
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string row_where = fmt::format("{}[{}]", where, i);
    nlohmann::json row = nlohmann::json::object();
    for (const std::string& key : texts) row[key] = json_string(rows[i], key, row_where);
    for (const std::string& key : numbers) row[key] = json_number(rows[i], key, row_where);
    out.push_back(std::move(row));
  }
  return out;
}

nlohmann::json ops_entry(const RunRecord& run) {
  if (!run.ops) return {{"missing", "no ops.json (the run did not finish, or an older Strata ran it)"}};
  const std::string where = ops_source(run);
  const nlohmann::json& coverage = json_required(*run.ops, "coverage", where);
  const std::string coverage_where = json_member(where, "coverage");
  const nlohmann::json& verdict = json_required(coverage, "verdict", coverage_where);
  const std::string verdict_where = json_member(coverage_where, "verdict");
  nlohmann::json entry{
      {"backend", json_string(coverage, "backend", coverage_where)},
      {"precision", json_string(coverage, "precision", coverage_where)},
      {"verdict", json_string(verdict, "text", verdict_where)},
      {"quick_switch", json_bool(verdict, "quick_switch", false, verdict_where)},
      {"ops", ops_rows(json_required(coverage, "ops", coverage_where), json_member(coverage_where, "ops"),
                       {"op", "dtype", "route"}, {"count", "share"})},
      {"ran_not_native", ops_rows(json_required(*run.ops, "ran_not_native", where),
                                  json_member(where, "ran_not_native"), {"op", "dtype", "shape", "route"}, {"count"})}};
  if (run.ops->contains("kernel_profile")) {
    const nlohmann::json& profile = (*run.ops)["kernel_profile"];
    const std::string profile_where = json_member(where, "kernel_profile");
    entry["kernel_profile"] = {
        {"graph_runs", json_number(profile, "graph_runs", profile_where)},
        {"ops", ops_rows(json_required(profile, "ops", profile_where), json_member(profile_where, "ops"), {"op"},
                         {"calls", "seconds", "flops"})}};
  }
  return entry;
}

nlohmann::json config_diff_json(const std::vector<RunRecord>& runs) {
  std::vector<std::map<std::string, std::string>> configs;
  for (const RunRecord& run : runs) configs.push_back(run.config);
  const ConfigDiff diff = diff_configs(configs);
  nlohmann::json differing = nlohmann::json::array();
  for (const ConfigDifference& difference : diff.differing) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& value : difference.values) values.push_back(value ? nlohmann::json(*value) : nlohmann::json());
    differing.push_back({{"key", difference.key}, {"values", values}});
  }
  return {{"differing", differing}, {"agreeing", diff.agreeing}};
}

}  // namespace

std::vector<std::string> run_labels(const std::vector<std::filesystem::path>& dirs) {
  std::vector<std::string> names;
  for (const std::filesystem::path& dir : dirs) {
    const std::filesystem::path trimmed = dir.has_filename() ? dir : dir.parent_path();  // "runs/a/" -> "a"
    names.push_back(trimmed.filename().string());
  }
  const std::set<std::string> distinct(names.begin(), names.end());
  if (distinct.size() == names.size()) return names;
  std::vector<std::string> paths;
  for (const std::filesystem::path& dir : dirs) paths.push_back(dir.string());
  return paths;
}

nlohmann::json report_document(const std::vector<RunRecord>& runs, const std::vector<std::string>& labels) {
  STRATA_CHECK(runs.size() == labels.size() && !runs.empty(), "{} runs, {} labels", runs.size(), labels.size());
  nlohmann::json run_entries = nlohmann::json::array();
  nlohmann::json planner = nlohmann::json::array();
  nlohmann::json ops = nlohmann::json::array();
  for (size_t i = 0; i < runs.size(); ++i) {
    run_entries.push_back({{"label", labels[i]},
                           {"dir", runs[i].dir.string()},
                           {"summary", summary(runs[i])},
                           {"skipped_steps", runs[i].skipped_steps}});
    planner.push_back(planner_entry(runs[i]));
    ops.push_back(ops_entry(runs[i]));
  }
  return {{"runs", run_entries},
          {"plots", plots(runs)},
          {"config_diff", config_diff_json(runs)},
          {"planner", planner},
          {"ops", ops}};
}

}  // namespace strata
