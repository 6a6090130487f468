#include "report/run_record.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "core/toml_reader.h"

namespace strata {

namespace {

void read_metrics(const std::filesystem::path& path, RunRecord& run) {
  std::istringstream lines(read_text_file(path));
  int64_t line_number = 0;
  int64_t previous_step = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_number;
    if (line.empty()) continue;
    const std::string where = fmt::format("{}:{}", path.string(), line_number);
    nlohmann::json record = parse_json(line, where);
    if (!record.is_object()) fail("{}: expected one JSON object per line, got {}", where, json_excerpt(record));
    if (!record.contains("step") || !record["step"].is_number_integer()) {
      fail("{}: key 'step' must be an integer", where);
    }
    const int64_t step = record["step"].get<int64_t>();
    if (step <= previous_step) {
      fail("{}: step {} does not follow step {} (metrics.jsonl holds each step once, in order)", where, step,
           previous_step);
    }
    previous_step = step;
    for (const auto& [key, value] : record.items()) {
      if (key == "step" || key == "skip_reason") continue;
      if (key == "skipped") {
        if (!value.is_boolean()) fail("{}: key 'skipped' must be true or false, got {}", where, json_excerpt(value));
        if (value.get<bool>()) run.skipped_steps.push_back(step);
        continue;
      }
      if (!value.is_number() && !value.is_null()) {
        fail("{}: key '{}' must be a number, got {}", where, key, json_excerpt(value));
      }
      MetricSeries& series = run.metrics[key];
      series.steps.push_back(step);
      series.values.push_back(value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>());
    }
  }
  if (previous_step == 0) fail("{}: no steps recorded", path.string());
}

std::optional<nlohmann::json> read_optional_json(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  nlohmann::json value = read_json_file(path);
  if (!value.is_object()) fail("{}: expected a JSON object, got {}", path.string(), json_excerpt(value));
  return value;
}

}  // namespace

int64_t RunRecord::last_step() const {
  int64_t last = 0;
  for (const auto& [name, series] : metrics) {
    if (!series.steps.empty()) last = std::max(last, series.steps.back());
  }
  return last;
}

RunRecord read_run(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) fail("{}: not a directory (expected a run directory of strata train)", dir.string());
  RunRecord run;
  run.dir = dir;
  const std::filesystem::path metrics = dir / "metrics.jsonl";
  const std::filesystem::path config = dir / "config.toml";
  for (const std::filesystem::path& needed : {metrics, config}) {
    if (!std::filesystem::exists(needed)) {
      fail("{}: not a run directory: it has no {} (strata train writes it when the run starts)", dir.string(),
           needed.filename().string());
    }
  }
  read_metrics(metrics, run);
  run.config = TomlReader::parse(read_text_file(config), config.string()).leaf_texts();
  run.plan = read_optional_json(dir / "plan.json");
  run.ops = read_optional_json(dir / "ops.json");
  return run;
}

}  // namespace strata
