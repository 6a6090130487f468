#pragma once
// What a training run writes and prints about itself, apart from its checkpoints: config.toml
// and plan.json at the start, the start-up lines, metrics.jsonl step by step (with a warning
// when the measured utilisation shows the described peak is wrong), and at the end the measured
// step time in plan.json, the kernel profile, ops.json, the fallback and transfer summaries.
// Every rank holds one; only the reporting rank writes and prints.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/profile_report.h"
#include "ops/dispatcher.h"
#include "parallel/job_world.h"
#include "planner/auto_plan.h"
#include "record/metrics.h"

namespace strata {

struct RunRecorderSettings {
  std::filesystem::path run_dir;
  int64_t total_steps = 0;     // train.steps
  int64_t continued_from = 0;  // the step the run resumes after (0: a fresh start)
  bool progress_bar = true;    // one process: a redrawn line on a terminal
  int64_t tokens_per_step = 0;  // over every rank
  double peak_flops = 0;       // what MFU is measured against (0: none)
  std::string peak_source;
};

// --profile: kernel time per op type over `runs` runs of the training graph.
struct KernelProfile {
  std::vector<OpProfileRow> rows;
  int64_t runs = 0;
};

class RunRecorder {
 public:
  // The reporting rank writes `config_toml` as config.toml and `plan` as plan.json, and opens metrics.jsonl.
  RunRecorder(RunRecorderSettings settings, JobWorld& world, const std::string& config_toml, const AutoPlan& plan);

  void print(const std::string& text) const;  // on the reporting rank only
  // A step's line of metrics.jsonl; `steps_this_run`: steps since this process started.
  void record_step(const StepMetrics& metrics, int64_t steps_this_run);
  // Called by every rank after the last step (it gathers every rank's peak memory). `coverage`
  // gives ops.json's coverage (called on the reporting rank only); `trace_report` is printed last.
  void finish(const Dispatcher& dispatcher, const std::string& backend, const std::function<nlohmann::json()>& coverage,
              const std::optional<KernelProfile>& profile, const std::string& trace_report);

 private:
  void print_measured_step(const std::vector<double>& peak_rss_mib);

  RunRecorderSettings settings_;
  JobWorld& world_;
  AutoPlan plan_;
  std::optional<MetricsLog> log_;
  std::vector<double> step_seconds_, comm_waits_, pipeline_waits_;
  bool peak_doubted_ = false;
};

}  // namespace strata
