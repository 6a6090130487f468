#pragma once
// One training run as `strata train` left it in its run directory: the per-step metrics
// (metrics.jsonl), the effective config (config.toml), and when present the planner's record
// (plan.json: predicted and measured step time) and the end-of-run op summary (ops.json).
// Every file is read as untrusted: a damaged one fails naming the file, the line and what is wrong.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

// One numeric field of metrics.jsonl over the steps that recorded it. A value written as null
// (an infinite or nan gradient norm of a skipped step) is NaN here.
struct MetricSeries {
  std::vector<int64_t> steps;
  std::vector<double> values;
};

struct RunRecord {
  std::filesystem::path dir;
  std::map<std::string, MetricSeries> metrics;  // by field name ("loss", "lr", ...)
  std::vector<int64_t> skipped_steps;           // steps whose update was skipped (fp16 overflow)
  std::map<std::string, std::string> config;    // dotted key -> its value as TOML text
  std::optional<nlohmann::json> plan;           // plan.json
  std::optional<nlohmann::json> ops;            // ops.json

  int64_t last_step() const;
};

// Fails when `dir` has no metrics.jsonl or config.toml, or when a line of metrics.jsonl is not a
// JSON object with an integer "step" above the previous line's and numbers (or null) elsewhere.
RunRecord read_run(const std::filesystem::path& dir);

}  // namespace strata
