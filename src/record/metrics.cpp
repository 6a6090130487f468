#include "record/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace strata {

namespace {

// Keeps the lines of steps up to `last_step`; rewrites the file (atomically) when that drops any.
void drop_lines_after(const std::string& path, int64_t last_step) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream lines(read_text_file(path));
  std::string kept;
  int64_t dropped = 0;
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool keep = record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
                      record["step"].get<int64_t>() <= last_step;
    if (keep) {
      kept += line + "\n";
    } else {
      ++dropped;
    }
  }
  if (dropped == 0) return;
  write_file_atomic(path, kept);
  fmt::print("{}: dropped {} line(s) after step {} (written after the checkpoint this run continues from)\n", path,
             dropped, last_step);
}

nlohmann::json router_fields(const RouterMetrics& router) {
  return {{"router_aux_loss", router.aux_loss},
          {"router_z_loss", router.z_loss},
          {"expert_tokens_min", router.expert_tokens_min},
          {"expert_tokens_max", router.expert_tokens_max},
          {"expert_tokens_mean", router.expert_tokens_mean},
          {"expert_tokens_dropped", router.dropped}};
}

// The plain line's router figures: the balance loss, and the busiest expert's load over the mean.
std::string router_summary(const std::optional<RouterMetrics>& router) {
  if (!router) return "";
  const double mean = router->expert_tokens_mean;
  const double imbalance = mean > 0 ? router->expert_tokens_max / mean : 0;
  std::string dropped = router->dropped > 0 ? fmt::format(" dropped {}", router->dropped) : "";
  return fmt::format(" | aux {:.4f} experts max/mean {:.2f}{}", router->aux_loss, imbalance, dropped);
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, int64_t total_steps, bool progress_bar, int64_t continued_from)
    : path_(path), total_steps_(total_steps), terminal_(progress_bar && isatty(STDOUT_FILENO) != 0) {
  drop_lines_after(path, continued_from);
  file_.open(path, std::ios::app);
  if (!file_) fail("cannot open metrics file '{}' for writing", path);
}

void MetricsLog::record(const StepMetrics& m, int64_t steps_this_run) {
  nlohmann::json line{{"step", m.step},           {"loss", m.loss},     {"lr", m.lr},
                      {"grad_norm", m.grad_norm}, {"tokens", m.tokens}, {"elapsed_s", m.elapsed_s},
                      {"tokens_per_s", m.tokens_per_s}};
  if (m.mfu) line["mfu"] = *m.mfu;
  if (m.val_loss) line["val_loss"] = *m.val_loss;
  if (m.loss_scale) line["loss_scale"] = *m.loss_scale;
  if (m.skipped) {
    line["skipped"] = true;
    line["skip_reason"] = m.skip_reason;
  }
  if (m.comm_wait_s) line["comm_wait_s"] = *m.comm_wait_s;
  if (m.pipeline_wait_s) line["pipeline_wait_s"] = *m.pipeline_wait_s;
  if (m.router) line.update(router_fields(*m.router));
  file_ << line.dump() << "\n";
  file_.flush();
  if (!file_) fail("writing metrics file '{}' failed", path_);

  double steps_left = static_cast<double>(total_steps_ - m.step);
  double eta = steps_this_run > 0 ? m.elapsed_s / static_cast<double>(steps_this_run) * steps_left : 0;
  std::string mfu = m.mfu ? fmt::format(" | MFU {:.1f}%", 100 * *m.mfu) : "";
  std::string val = m.val_loss ? fmt::format(" val {:.4f}", *m.val_loss) : "";
  if (m.skipped) val += " (skipped: " + m.skip_reason + ")";
  if (terminal_) {
    int width = 30;
    int filled = static_cast<int>(width * m.step / std::max<int64_t>(total_steps_, 1));
    fmt::print("\r[{}{}] step {}/{} loss {:.4f}{} | {:.0f} tok/s{} | ETA {:.0f}s   ", std::string(filled, '#'),
               std::string(width - filled, '.'), m.step, total_steps_, m.loss, val, m.tokens_per_s, mfu, eta);
    if (m.val_loss) fmt::print("\n");
    std::fflush(stdout);
  } else {
    fmt::print("step {}/{} loss {:.4f}{} lr {:.3e} grad_norm {:.3f}{} | {:.0f} tok/s{} | ETA {:.0f}s\n", m.step,
               total_steps_, m.loss, val, m.lr, m.grad_norm, router_summary(m.router), m.tokens_per_s, mfu, eta);
    std::fflush(stdout);  // a log file or pipe sees each step as it happens
  }
}

void MetricsLog::finish() {
  if (terminal_) fmt::print("\n");
}

}  // namespace strata
