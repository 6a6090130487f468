// `strata compare CONFIG --a KEY=VAL ... --b KEY=VAL ...`: two runs of one config compared tensor
// by tensor (src/compare/); `--golden DUMP` compares side b with tools/torch_dump.py's output.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/mpirun.h"
#include "compare/compare_runs.h"
#include "core/file_io.h"
#include "core/subprocess.h"

namespace strata::cli {

namespace {

// The exit status when a tensor fails (1 is an error, as for every command).
constexpr int kComparisonFailed = 3;

// A side under a parallel layout: `strata train` as `ranks` processes (mpirun past one), its output
// kept and shown only when it fails.
void launch_train(int ranks, const std::vector<std::string>& train_args) {
  if (launched_by_mpirun()) {
    fail("strata compare starts the ranks of a side with a parallel layout itself: run it without mpirun");
  }
  std::vector<std::string> command = train_args;
  command.insert(command.begin(), this_executable());
  if (ranks > 1) command = mpirun_command(ranks, train_args);
  fmt::print("running a side: {}\n", fmt::join(command, " "));
  std::fflush(stdout);
  const ProcessOutcome run = run_process(command, /*capture_stderr=*/true);
  if (run.exit_status == 0) return;
  const size_t tail = run.output.size() > 4000 ? run.output.size() - 4000 : 0;
  fail("a side's run failed (exit status {}); the end of its output:\n{}", run.exit_status, run.output.substr(tail));
}

struct CompareArgs {
  CompareRequest request;
  std::string json, csv, golden_inputs, rerun = "failing";
  bool every_tensor = false;
};

void run_compare(const CompareArgs& args) {
  if (!args.golden_inputs.empty()) {
    write_golden_inputs(args.request, args.golden_inputs);
    fmt::print("wrote {0}/config.json, {0}/model.safetensors (initial weights) and {0}/batch.safetensors (the first "
               "micro-batch); next: python3 tools/torch_dump.py {0} --out DUMP, then strata compare {1} --golden DUMP\n",
               args.golden_inputs, args.request.config);
    return;
  }
  CompareRequest request = args.request;
  request.launch_train = launch_train;
  request.rerun = parse_rerun(args.rerun);
  const CompareOutcome outcome = compare_runs(request);
  fmt::print("{}", comparison_table(outcome.comparison, outcome.header, args.every_tensor));
  if (!args.json.empty()) write_file_atomic(args.json, comparison_json(outcome.comparison, outcome.header).dump(1) + "\n");
  if (!args.csv.empty()) write_file_atomic(args.csv, comparison_csv(outcome.comparison));
  if (outcome.comparison.failed()) {
    std::fflush(stdout);
    std::exit(kComparisonFailed);
  }
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "compare", "Compare two runs of a config (or one and a PyTorch golden dump) tensor by tensor; exits 3 when any "
                 "tensor fails its tolerance");
  auto args = std::make_shared<CompareArgs>();
  command->add_option("config", args->request.config, "TOML config file (its [compare] table sets tolerances)")
      ->required();
  command->add_option("--set", args->request.common, "Override a config key on both sides (repeatable)");
  command->add_option("--a", args->request.a, "Override a config key on side a, the baseline (repeatable)");
  command->add_option("--b", args->request.b, "Override a config key on side b, the candidate (repeatable)");
  command->add_option("--steps", args->request.steps,
                      "Also train N steps on both sides and compare each step's loss, gradient norm and parameters (a "
                      "side that sets parallel.dp, tp or pp runs as ranks of strata train; its graph tensors are put "
                      "back together whole)");
  command->add_option("--golden", args->request.golden,
                      "A tools/torch_dump.py dump (safetensors) to compare side b with, in place of side a");
  command->add_option("--golden-inputs", args->golden_inputs,
                      "Write side b's initial weights and first batch to DIR for tools/torch_dump.py, and stop");
  command->add_option("--json", args->json, "Also write every tensor's figures as JSON");
  command->add_option("--csv", args->csv, "Also write every tensor's figures as CSV");
  command->add_option("--rerun", args->rerun,
                      "Which ops to re-run alone in f64 (the ref kernels) and judge each side against: none, failing "
                      "(those a tolerance fails and one in eight that pass; the default) or all. Only where side a runs "
                      "in one process")
      ->check(CLI::IsMember({"none", "failing", "all"}));
  command->add_option("--explain", args->request.explain,
                      "Print one tensor's judgement in full: its op, its inputs' figures, each side against the f64 "
                      "re-run, the bound's terms and the verdict");
  command->add_flag("--all", args->every_tensor, "List every tensor, not only those that fail or are on one side");
  command->callback([args] { run_compare(*args); });
}

}  // namespace strata::cli
