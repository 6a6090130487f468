#include "compare/compare_runs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/toml_reader.h"
#include "model/family.h"
#include "parallel/parallel_dimension.h"
#include "train/config.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> joined(const std::vector<std::string>& common, const std::vector<std::string>& side) {
  std::vector<std::string> all = common;
  all.insert(all.end(), side.begin(), side.end());
  return all;
}

std::string describe_side(const std::vector<std::string>& overrides) {
  return overrides.empty() ? "the config as it is" : fmt::format("{}", fmt::join(overrides, " "));
}

ToleranceTable tolerances_of(const std::string& config_path) {
  ToleranceTable table;
  table.apply(TomlReader::parse(read_text_file(config_path), config_path).table("compare", false));
  return table;
}

std::string batch_text(const TrainConfig& config) {
  return fmt::format("{} x {} tokens, the first of the {} micro-batches of the step the config trains next{}",
                     config.batch_size, config.model.block_size, config.accumulation_steps(),
                     config.resume ? " (after the newest checkpoint in checkpoint.dir, if any)" : "");
}

bool same_tokens(const Tensor& dumped, const Tensor& ours) {
  if (dumped.shape() != ours.shape()) return false;
  const Tensor a = dumped.to(DType::I64), b = ours.to(DType::I64);
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (a.data<int64_t>()[i] != b.data<int64_t>()[i]) return false;
  }
  return true;
}

// "dp=2 tp=2 pp=1 zero=1 sp": every dimension's degree, in the order their config keys are named.
std::string layout_text(const TrainConfig& config) {
  std::string text;
  for (const MeshExtent& extent : config.mesh().named_extents()) {
    text += fmt::format("{}{}={}", text.empty() ? "" : " ", extent.dimension, extent.degree);
  }
  return text + (config.zero > 0 ? fmt::format(" zero={}", config.zero) : "") + (config.sp ? " sp" : "");
}

CaptureOptions side_options(const CompareRequest& request, Comparator& comparator, bool side_b) {
  return {.steps = request.steps,
          .graph_inputs = [&comparator, side_b](const std::string& name, const Tensor& value) {
            comparator.add_graph_input(name, value, side_b);
          }};
}

// Side a's steps again with its sums in another order (the other ops.sum_order, which permutes every GEMM's
// sums, and another thread count, which splits some reductions differently): how far its loss and gradient
// norm move, the spread correct runs show. One reordering is one draw of the rounding, which can land far
// below its usual size, and no two runs agree on an f32 figure below its last bit: a spread that is not
// zero counts as at least one f32 ulp of the figure. `figures`: side a's own, by name.
std::map<std::string, double> step_spread(const CompareRequest& request, const TrainConfig& config_a,
                                          const std::map<std::string, double>& figures) {
  if (request.steps == 0 || request.rerun == Rerun::None) return {};
  std::vector<std::string> reordered = joined(request.common, request.a);
  reordered.push_back(fmt::format("ops.sum_order={}", config_a.summation_order() == SumOrder::Permuted ? "natural" : "permuted"));
  reordered.push_back(fmt::format("ops.threads={}", config_a.threads == 1 ? 2 : 1));
  std::map<std::string, double> spread;
  capture_run(load_train_config(request.config, reordered), {.steps = request.steps}, [&](CapturedTensor&& t) {
    auto found = figures.find(t.name);
    if (found == figures.end()) return;
    const double moved = std::abs(t.tensor.item() - found->second);
    const double ulp = std::numeric_limits<float>::epsilon() * std::abs(found->second);
    spread[t.name] = moved > 0 ? std::max(moved, ulp) : 0.0;
  });
  return spread;
}

// Side a into the comparator, its steps' loss and gradient norm also kept by name (for step_spread).
CaptureSink baseline_sink(Comparator& comparator, std::map<std::string, double>& figures) {
  return [&comparator, &figures](CapturedTensor&& tensor) {
    if (tensor.op == kStepLossOp || tensor.op == kStepGradNormOp) figures[tensor.name] = tensor.tensor.item();
    comparator.add_baseline(std::move(tensor));
  };
}

// Both sides run by `strata train` under their layouts, compared after each step.
CompareOutcome compare_layouts(const CompareRequest& request, const TrainConfig& config_a, const TrainConfig& config_b) {
  const int side_ranks = std::max(layout_ranks(config_a), layout_ranks(config_b));
  if (!request.golden.empty()) {
    fail("--golden compares one process's graph tensors, but side b runs {} ranks ({}): drop the parallel layout",
         side_ranks, layout_text(config_b));
  }
  STRATA_CHECK(static_cast<bool>(request.launch_train), "no way to launch a side's run");
  Comparator comparator(tolerances_of(request.config), /*report_candidate_only=*/true);
  CompareOutcome outcome;
  outcome.header.baseline = describe_side(joined(request.common, request.a)) + " (" + layout_text(config_a) + ")";
  outcome.header.candidate = describe_side(joined(request.common, request.b)) + " (" + layout_text(config_b) + ")";
  outcome.header.batch = fmt::format(
      "{}, each side run by strata train under its layout, its ranks' tensors put back together whole{}",
      batch_text(config_b),
      request.steps > 0 ? fmt::format("; then {} step(s), compared after each: loss, gradient norm and every parameter "
                                      "(assembled whole from the side's checkpoint)",
                                      request.steps)
                        : "");
  const TemporaryDirectory work("strata-compare");
  auto baseline = [&](CapturedTensor&& tensor) { comparator.add_baseline(std::move(tensor)); };
  if (layout_ranks(config_a) == 1 && (request.rerun != Rerun::None || !request.explain.empty())) {
    // One process: run here, keeping what re-running its ops needs (a launch would keep no attributes).
    comparator.judge_against_truth(request.rerun, request.explain, /*candidate_nodes=*/false);
    std::map<std::string, double> figures;
    capture_run(config_a, side_options(request, comparator, false), baseline_sink(comparator, figures));
    comparator.set_step_spread(step_spread(request, config_a, figures));
  } else {
    capture_layout_steps(request.config, joined(request.common, request.a), config_a, request.steps, work.path() / "a",
                         request.launch_train, baseline);
  }
  capture_layout_steps(request.config, joined(request.common, request.b), config_b, request.steps, work.path() / "b",
                       request.launch_train, [&](CapturedTensor&& tensor) { comparator.add_candidate(std::move(tensor)); });
  outcome.comparison = std::move(comparator).finish();
  return outcome;
}

}  // namespace

CompareOutcome compare_runs(const CompareRequest& request) {
  if (!request.golden.empty() && !request.a.empty()) fail("--a does not go with --golden: the dump is side a");
  if (!request.golden.empty() && !request.explain.empty()) fail("--explain re-runs side a's ops: it does not go with --golden");
  if (request.steps < 0) fail("--steps must be at least 0, got {}", request.steps);
  const TrainConfig config_b = load_train_config(request.config, joined(request.common, request.b));
  const TrainConfig config_a = load_train_config(request.config, joined(request.common, request.a));
  if (layout_ranks(config_a) > 1 || layout_ranks(config_b) > 1) return compare_layouts(request, config_a, config_b);
  Comparator comparator(tolerances_of(request.config), request.golden.empty());
  CompareOutcome outcome;
  outcome.header.candidate = describe_side(joined(request.common, request.b));
  outcome.header.batch = batch_text(config_b);
  const CaptureOptions options{.steps = request.steps};
  Tensor golden_tokens, golden_targets;
  if (request.golden.empty()) {
    outcome.header.baseline = describe_side(joined(request.common, request.a));
    comparator.judge_against_truth(request.rerun, request.explain, /*candidate_nodes=*/true);
    std::map<std::string, double> figures;
    capture_run(config_a, side_options(request, comparator, false), baseline_sink(comparator, figures));
    comparator.set_step_spread(step_spread(request, config_a, figures));
  } else {
    if (request.steps > 0) fail("--steps does not go with --golden: a dump holds one step's tensors");
    outcome.header.baseline = "golden dump " + request.golden;
    const SafetensorsReader dump(request.golden);
    for (const auto& [name, entry] : dump.entries()) {
      if (name == kGoldenTokens || name == kGoldenTargets) continue;
      comparator.add_baseline({name, "golden", entry.dtype, entry.dtype, dump.load(name), 1.0, {}});
    }
    if (!dump.contains(kGoldenTokens) || !dump.contains(kGoldenTargets)) {
      fail("{}: a golden dump holds the batch it ran ('{}' and '{}')", request.golden, kGoldenTokens, kGoldenTargets);
    }
    golden_tokens = dump.load(kGoldenTokens);
    golden_targets = dump.load(kGoldenTargets);
  }
  const CapturedRun run =
      capture_run(config_b, request.golden.empty() ? side_options(request, comparator, true) : options, [&](CapturedTensor&& tensor) { comparator.add_candidate(std::move(tensor)); });
  if (golden_tokens.defined() && (!same_tokens(golden_tokens, run.tokens) || !same_tokens(golden_targets, run.targets))) {
    fail("{}: the dump ran another batch than this config's first one (make it from the batch.safetensors "
         "`strata compare --golden-inputs` writes)",
         request.golden);
  }
  outcome.comparison = std::move(comparator).finish();
  return outcome;
}

void write_golden_inputs(const CompareRequest& request, const fs::path& out) {
  const TrainConfig config = load_train_config(request.config, joined(request.common, request.b));
  std::error_code error;
  fs::create_directories(out, error);
  if (error) fail("cannot create '{}': {}", out.string(), error.message());
  const CapturedRun run = capture_run(config, {.initial_parameters = true}, [](CapturedTensor&&) {});
  TensorMap parameters;
  for (const auto& [name, tensor] : run.initial_parameters) parameters[name] = tensor;
  write_safetensors(out / "model.safetensors", parameters, {{"format", "pt"}});
  write_file_atomic(out / "config.json", model_family(config.model).to_hf_config(config.model).dump(2) + "\n");
  write_safetensors(out / "batch.safetensors", {{kGoldenTokens, run.tokens}, {kGoldenTargets, run.targets}});
}

}  // namespace strata
