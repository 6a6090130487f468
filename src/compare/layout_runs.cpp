#include "compare/layout_runs.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/training_checkpoint.h"
#include "compare/adamw_reach.h"
#include "compare/rank_dump.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json_fields.h"
#include "core/json_file.h"
#include "model/parameters.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

struct StepFigures {
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
};

std::map<int64_t, StepFigures> read_step_figures(const fs::path& metrics) {
  std::map<int64_t, StepFigures> figures;
  std::istringstream lines(read_text_file(metrics));
  int64_t number = 0;
  for (std::string line; std::getline(lines, line);) {
    const std::string where = fmt::format("'{}:{}'", metrics.string(), ++number);
    const nlohmann::json record = parse_json(line, where);
    expect_json_object(record, where);
    // An infinite gradient norm (a skipped fp16 step) is written as null: compared as NaN.
    auto figure = [&](const char* key) {
      return json_required(record, key, where).is_null() ? std::nan("") : json_number(record, key, where);
    };
    const double step = json_number(record, "step", where);
    if (step != std::floor(step)) fail("{}: step is {}, not a whole number", where, step);
    figures[static_cast<int64_t>(step)] = {figure("loss"), figure("grad_norm"), json_number(record, "lr", where)};
  }
  return figures;
}

// Where the side starts: a copy of the newest checkpoint of checkpoint.dir when the config resumes
// from one (its step), else nothing (step 0: the seed or model.init_from).
int64_t copy_starting_checkpoint(const TrainConfig& config, const fs::path& work) {
  if (!config.resume || !has_checkpoints(config.run_dir)) return 0;
  const fs::path newest = resolve_checkpoint(config.run_dir);
  const int64_t step = read_training_checkpoint(Checkpoint(newest)).step;
  fs::copy(newest, work / newest.filename(), fs::copy_options::recursive);
  write_file_atomic(work / kLatestPointer, newest.filename().string() + "\n");
  return step;
}

}  // namespace

int layout_ranks(const TrainConfig& config) { return config.mesh().size(); }

void capture_layout_steps(const std::string& config_path, const std::vector<std::string>& overrides,
                          const TrainConfig& config, int64_t steps, const fs::path& work,
                          const TrainLauncher& launch, const CaptureSink& sink) {
  fs::create_directories(work);
  const int64_t first = copy_starting_checkpoint(config, work);
  const fs::path graph = work / "graph";
  // One launch per step: each ends after its step (train.exit_at_step, which saves) and the next resumes from that
  // checkpoint, the only one kept, so the scratch space holds one state of the model, not one per step. Resuming
  // is bit-identical, so these are one run's steps. No validation (it changes nothing compared).
  auto run_through = [&](int64_t step) {
    std::vector<std::string> args{"train", config_path};
    if (step == first + 1) args.insert(args.end(), {"--capture-graph", graph.string()});
    std::vector<std::string> assignments = overrides;
    assignments.insert(assignments.end(),
                       {"checkpoint.dir=" + work.string(), "checkpoint.every=0", "checkpoint.keep=1",
                        "checkpoint.resume=true", fmt::format("train.steps={}", first + std::max<int64_t>(steps, 1)),
                        "train.val_every=0", fmt::format("train.exit_at_step={}", step)});
    for (const std::string& assignment : assignments) args.insert(args.end(), {"--set", assignment});
    launch(layout_ranks(config), args);
  };
  run_through(first + 1);
  assemble_rank_dumps(graph, sink);
  if (steps == 0) return;

  const DType precision = config.precision_policy().low;
  AdamwReach reach(config.beta1, config.beta2);
  for (int64_t k = 1; k <= steps; ++k) {
    const int64_t step = first + k;
    if (k > 1) run_through(step);
    const std::map<int64_t, StepFigures> figures = read_step_figures(work / "metrics.jsonl");
    auto found = figures.find(step);
    if (found == figures.end()) fail("{}: the side's run recorded no step {}", (work / "metrics.jsonl").string(), step);
    ParameterSet parameters(model_param_specs(config.model));
    load_training_parameters(Checkpoint(resolve_checkpoint(work / checkpoint_dir_name(step))), parameters);
    reach.add_step(step, found->second.lr);
    capture_step_figures(k, found->second.loss, found->second.grad_norm, parameters, precision, reach.total(), sink);
  }
}

}  // namespace strata
