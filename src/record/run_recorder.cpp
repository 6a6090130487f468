#include "record/run_recorder.h"

#include <sys/resource.h>

#include <algorithm>

#include <fmt/core.h>

#include "core/file_io.h"
#include "core/median.h"
#include "record/ops_record.h"

namespace strata {

namespace {

// Peak resident memory of this process so far (Linux reports KiB).
double peak_rss_mib_of_this_process() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

}  // namespace

RunRecorder::RunRecorder(RunRecorderSettings settings, JobWorld& world, const std::string& config_toml,
                     const AutoPlan& plan)
    : settings_(std::move(settings)), world_(world), plan_(plan) {
  if (!world_.reports()) return;
  std::filesystem::create_directories(settings_.run_dir);
  write_file_atomic(settings_.run_dir / "config.toml", config_toml);
  write_plan_record(settings_.run_dir, plan_);
  log_.emplace((settings_.run_dir / "metrics.jsonl").string(), settings_.total_steps, settings_.progress_bar,
               settings_.continued_from);
}

void RunRecorder::print(const std::string& text) const {
  if (world_.reports()) fmt::print("{}", text);
}

void RunRecorder::record_step(const StepMetrics& metrics, int64_t steps_this_run) {
  if (metrics.mfu && *metrics.mfu > 1 && !peak_doubted_) {
    peak_doubted_ = true;  // a utilisation above 100% means the described peak is wrong, not the run
    print(fmt::format("warning: MFU {:.0f}% at step {}: this run beats the {} ({:.3g} TFLOP/s), so that figure "
                      "is too low for this machine; `strata calibrate` measures one to use as parallel.cluster\n",
                      100 * *metrics.mfu, metrics.step, settings_.peak_source, settings_.peak_flops / 1e12));
  }
  if (metrics.comm_wait_s) comm_waits_.push_back(*metrics.comm_wait_s);
  if (metrics.pipeline_wait_s) pipeline_waits_.push_back(*metrics.pipeline_wait_s);
  step_seconds_.push_back(static_cast<double>(settings_.tokens_per_step) / metrics.tokens_per_s);
  if (log_) log_->record(metrics, steps_this_run);
}

void RunRecorder::print_measured_step(const std::vector<double>& peak_rss_mib) {
  if (step_seconds_.size() < 2) return;
  // Medians after the first step (which pays first-touch costs) are the measured figures.
  const double step_s = median_after_first(step_seconds_);
  nlohmann::json more = {{"peak_rss_mib_per_rank", peak_rss_mib}};
  if (comm_waits_.size() > 1) more["comm_wait_s"] = median_after_first(comm_waits_);
  if (pipeline_waits_.size() > 1) more["pipeline_wait_s"] = median_after_first(pipeline_waits_);
  record_measured_step(settings_.run_dir, step_s, static_cast<int64_t>(step_seconds_.size() - 1), more);
  const std::string versus = plan_.record["chosen"].contains("step_s")
                                 ? fmt::format("; predicted {:.4f} s (measured / predicted {:.2f})",
                                               plan_.chosen.step_s, step_s / plan_.chosen.step_s)
                                 : "";
  fmt::print("measured {:.4f} s/step (median of {} steps after the first){}; peak memory {:.0f} MiB per rank\n", step_s,
             step_seconds_.size() - 1, versus, *std::max_element(peak_rss_mib.begin(), peak_rss_mib.end()));
}

void RunRecorder::finish(const Dispatcher& dispatcher, const std::string& backend,
                       const std::function<nlohmann::json()>& coverage, const std::optional<KernelProfile>& profile,
                       const std::string& trace_report) {
  const std::vector<double> peak_rss_mib = world_.gather(peak_rss_mib_of_this_process());
  if (!log_) return;
  log_->finish();
  print_measured_step(peak_rss_mib);
  if (profile) {
    fmt::print("training graph, kernel time per op over {} runs (the first pays first-touch costs):\n{}", profile->runs,
               format_op_profile(profile->rows, profile->runs));
  }
  const int64_t steps_run = static_cast<int64_t>(step_seconds_.size());
  write_ops_record(settings_.run_dir, coverage(), dispatcher.records(), dispatcher.transfers(), steps_run,
                   profile ? profile->rows : std::vector<OpProfileRow>{}, profile ? profile->runs : 0);
  const std::string fallbacks = dispatcher.summary();
  fmt::print("{}", fallbacks.empty() ? "every op ran natively on backend '" + backend + "'\n" : fallbacks);
  if (const TransferTotals moved = dispatcher.transfer_totals(); moved.count > 0 && steps_run > 0) {
    const double per_step = 1.0 / static_cast<double>(steps_run);
    fmt::print("host-device transfers of the ops above: {:.1f} tensors, {:.3f} MB, {:.2f} ms per step\n",
               static_cast<double>(moved.count) * per_step, static_cast<double>(moved.bytes) * per_step / 1e6,
               moved.seconds * per_step * 1e3);
  }
  fmt::print("{}", trace_report);
}

}  // namespace strata
