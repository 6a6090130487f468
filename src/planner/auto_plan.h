#pragma once
// Choosing the plan for a training run (`parallel.plan = "auto"`) and
// recording it in the run directory, so predicted and measured step times can
// be compared afterwards.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "planner/search.h"

namespace strata {

// A cluster from a file or preset name, looked up as given, then as
// configs/clusters/<name>.toml in the working directory and beside the
// executable's build tree. A calibrated cluster file (from `strata calibrate`,
// with a [measured] table) is this machine as `devices` processes of `threads`
// threads (threads 0: all cores measured, devices 0: as many as the cores
// allow); any other describes its device itself (threads must be 0).
ClusterSpec resolve_cluster(const std::string& name_or_path, int threads = 0, int devices = 0);
// The cluster a job of `ranks` processes of `threads_per_rank` threads on this
// machine plans for: a calibrated file priced for exactly that split, any other
// as it describes itself. Reads the file once.
ClusterSpec resolve_cluster_for_job(const std::string& name_or_path, int threads_per_rank, int ranks);
std::filesystem::path find_cluster_file(const std::string& name_or_path);

struct AutoPlanRequest {
  std::string model_name = "model";
  ModelConfig model;
  int64_t global_batch = 0;  // rows per optimizer step
  int64_t seq = 0;           // tokens per row
  DType dtype = DType::F32;
  ClusterSpec cluster;
  PlanLimits limits;  // what the run cannot change (fixed degrees, recomputation, ...)
  size_t keep = 5;    // runners-up kept in the record
};

struct AutoPlan {
  Prediction chosen;
  nlohmann::json record;  // the problem, the chosen plan and prediction, runners-up, rejected regions
};

// Throws naming the rejected regions when no plan fits.
AutoPlan auto_plan(const AutoPlanRequest& request);
// The prediction for a layout the user fixed (`parallel.plan = "manual"`);
// request.limits are not used.
AutoPlan predict_plan(const AutoPlanRequest& request, const ParallelPlan& plan);

// run_dir/plan.json (atomic).
void write_plan_record(const std::filesystem::path& run_dir, const AutoPlan& plan);
// Adds {"measured": {"step_s", "steps", "predicted_over_measured" (when a step
// time was predicted), and the entries of `more`}} to run_dir/plan.json.
void record_measured_step(const std::filesystem::path& run_dir, double measured_step_s, int64_t steps,
                          const nlohmann::json& more = nlohmann::json::object());

}  // namespace strata
