#pragma once
// Training progress: one JSON object per optimizer step in metrics.jsonl, and
// a progress bar on a terminal (plain lines otherwise).
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

namespace strata {

// A mixture-of-experts model's router over one step (model/model_graph.h's RouterLosses). The counts
// are assignments (a token routed to k experts counts k times), summed over the MoE layers and the
// step's micro-batches on every data-parallel rank.
struct RouterMetrics {
  double aux_loss = 0;  // the load-balancing loss, unweighted, mean over the step's micro-batches
  double z_loss = 0;    // the router z-loss, unweighted, likewise
  double expert_tokens_min = 0;  // the fewest assignments routed to one expert
  double expert_tokens_max = 0;
  double expert_tokens_mean = 0;
  int64_t dropped = 0;  // assignments over an expert's capacity (model.capacity_factor; 0 when dropless)
};

struct StepMetrics {
  int64_t step = 0;  // 1-based optimizer step
  double loss = 0;   // mean over the step's micro-batches
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  int64_t tokens = 0;         // seen since the run's first step, over every rank
  double elapsed_s = 0;       // wall time since this process started training
  std::optional<double> mfu;  // model FLOPs per second over the peak (per token: the family's training_flops_per_token)
  std::optional<double> val_loss;
  std::optional<double> loss_scale;  // fp16: the scale the step's gradients were computed with
  bool skipped = false;              // parameters left unchanged: the gradients held inf or nan
  std::string skip_reason;
  // Data parallelism: seconds spent waiting for the gradient sums after the
  // backward pass (the communication it did not hide).
  std::optional<double> comm_wait_s;
  // Pipeline parallelism: seconds the reporting rank's stage (the first) waited
  // for other stages (receives and sends): its pipeline bubble, transfers included.
  std::optional<double> pipeline_wait_s;
  std::optional<RouterMetrics> router;  // mixture-of-experts models only
};

class MetricsLog {
 public:
  // Appends to `path`, a run that continues from step `continued_from` first
  // dropping the lines of later steps (written after that checkpoint by a run
  // that died), so the file reads as one uninterrupted run. With
  // `progress_bar` and stdout a terminal, progress redraws one line;
  // otherwise one line per step.
  MetricsLog(const std::string& path, int64_t total_steps, bool progress_bar = true, int64_t continued_from = 0);
  // `steps_this_run`: steps since this process started (the time left is estimated from them).
  void record(const StepMetrics& metrics, int64_t steps_this_run);
  void finish();

 private:
  std::ofstream file_;
  std::string path_;
  int64_t total_steps_;
  bool terminal_;
};

}  // namespace strata
