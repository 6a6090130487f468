#include "planner/auto_plan.h"

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "core/toml_reader.h"
#include "planner/profile.h"
#include "planner/report.h"

namespace strata {

namespace {

constexpr const char* kPlanFile = "plan.json";

}  // namespace

std::filesystem::path find_cluster_file(const std::string& name_or_path) {
  std::filesystem::path given(name_or_path);
  if (std::filesystem::exists(given)) return given;
  std::filesystem::path relative = std::filesystem::path("configs") / "clusters" / (name_or_path + ".toml");
  std::vector<std::filesystem::path> roots = {std::filesystem::current_path()};
  std::error_code error;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    for (std::filesystem::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path()) {
      roots.push_back(dir);
    }
  }
  for (const std::filesystem::path& root : roots) {
    if (std::filesystem::exists(root / relative)) return root / relative;
  }
  fail("cluster '{}' is neither a file nor a preset in configs/clusters/ (looked in {} and above the executable)",
       name_or_path, std::filesystem::current_path().string());
}

namespace {

// A cluster file, parsed; old JSON profiles are refused with what to do instead.
TomlReader read_cluster_file(const std::filesystem::path& path) {
  if (path.extension() == ".json") load_profile(path);
  return TomlReader::parse(read_text_file(path), path.string());
}

// A calibrated file as `devices` processes of `threads` threads (threads 0: all cores
// measured, devices 0: as many as the cores allow).
ClusterSpec measured_cluster(const TomlReader& file, int threads, int devices) {
  HardwareProfile profile = read_measured_cluster(file);
  if (threads == 0) threads = profile.threads.back().threads;
  if (devices == 0) devices = std::max(1, profile.cores / threads);
  return cluster_from_profile(profile, threads, devices, file.source());
}

}  // namespace

ClusterSpec resolve_cluster(const std::string& name_or_path, int threads, int devices) {
  TomlReader file = read_cluster_file(find_cluster_file(name_or_path));
  if (is_measured_cluster(file)) return measured_cluster(file, threads, devices);
  if (threads != 0) {
    fail("--threads applies to a calibrated cluster file (written by `strata calibrate`), not to {}", file.source());
  }
  return read_cluster(file);
}

ClusterSpec resolve_cluster_for_job(const std::string& name_or_path, int threads_per_rank, int ranks) {
  TomlReader file = read_cluster_file(find_cluster_file(name_or_path));
  return is_measured_cluster(file) ? measured_cluster(file, threads_per_rank, ranks) : read_cluster(file);
}

AutoPlan auto_plan(const AutoPlanRequest& request) {
  CostModel model(PlanningProblem{request.model_name, request.model, request.global_batch, request.seq, request.dtype,
                                  request.cluster});
  SearchResult result = search_plans(model, request.limits, std::max<size_t>(request.keep, 1));
  if (result.ranked.empty()) {
    std::string why;
    for (const RejectedRegion& region : result.rejected) {
      why += fmt::format("; {} {} (e.g. {})", region.count, region.reason, region.example);
      if (!region.details.empty()) why += ": " + region.details.front();
    }
    fail("no parallel plan for {} on {} fits the limits{}", request.model_name, request.cluster.name,
         why.empty() ? "" : why);
  }
  AutoPlan plan;
  plan.chosen = result.ranked.front();
  plan.record = report_json(model, result, request.keep);
  plan.record["chosen"] = prediction_json(plan.chosen);
  return plan;
}

AutoPlan predict_plan(const AutoPlanRequest& request, const ParallelPlan& plan) {
  CostModel model(PlanningProblem{request.model_name, request.model, request.global_batch, request.seq, request.dtype,
                                  request.cluster});
  AutoPlan predicted;
  predicted.chosen = model.evaluate(plan, CostModel::PipelineTiming::Replayed);
  predicted.record = {{"mode", "manual"}, {"cluster", request.cluster.name},
                      {"chosen", prediction_json(predicted.chosen)}};
  return predicted;
}

void write_plan_record(const std::filesystem::path& run_dir, const AutoPlan& plan) {
  std::filesystem::create_directories(run_dir);
  write_file_atomic(run_dir / kPlanFile, plan.record.dump(2) + "\n");
}

void record_measured_step(const std::filesystem::path& run_dir, double measured_step_s, int64_t steps,
                          const nlohmann::json& more) {
  std::filesystem::path path = run_dir / kPlanFile;
  nlohmann::json record = read_json_file(path);
  if (!record.contains("chosen")) fail("{}: no chosen plan recorded", path.string());
  nlohmann::json measured = {{"step_s", measured_step_s}, {"steps", steps}};
  if (record["chosen"].contains("step_s") && measured_step_s > 0) {
    measured["predicted_over_measured"] = record["chosen"]["step_s"].get<double>() / measured_step_s;
  }
  measured.update(more);
  record["measured"] = measured;
  write_file_atomic(path, record.dump(2) + "\n");
}

}  // namespace strata
