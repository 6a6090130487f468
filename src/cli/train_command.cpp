#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/mpirun.h"
#include "comm/mpi_session.h"
#include "compare/rank_dump.h"
#include "parallel/device_mesh.h"
#include "parallel/group_collectives.h"
#include "train/stop_signals.h"
#include "train/trainer.h"

namespace strata::cli {

namespace {

// `strata train ... --nproc N` on one host: runs the same command as N ranks
// under mpirun (as torchrun --nproc-per-node does) and never returns.
// What `strata train` does besides training: --profile, --trace FILE, --trace-steps A:B.
struct Instrumentation {
  bool profile = false;
  std::string trace;
  std::string trace_steps;
  std::string capture_graph;  // strata compare's: the first micro-batch's graph tensors, per rank
};

void instrument(Trainer& trainer, const Instrumentation& instrumentation) {
  if (instrumentation.profile) trainer.enable_profiling();
  if (!instrumentation.trace.empty()) {
    TraceOptions options =
        instrumentation.trace_steps.empty() ? TraceOptions{} : parse_trace_steps(instrumentation.trace_steps);
    options.path = instrumentation.trace;
    trainer.enable_tracing(options);
  }
}

// Runs the trainer, with --capture-graph writing this rank's graph tensors after the run.
int run_instrumented(Trainer& trainer, const TrainConfig& config, const Instrumentation& instrumentation) {
  instrument(trainer, instrumentation);
  if (instrumentation.capture_graph.empty()) return trainer.run();
  RankGraphDump dump(trainer, config, instrumentation.capture_graph);
  const int signal = trainer.run();
  dump.write();
  return signal;
}

[[noreturn]] void exec_under_mpirun(int ranks, const std::string& config, const std::vector<std::string>& overrides,
                                    const Instrumentation& instrumentation) {
  if (launched_by_mpirun()) fail("--nproc: this command already runs under mpirun; drop --nproc or mpirun");
  std::vector<std::string> strata_args{"train", config};
  for (const std::string& assignment : overrides) strata_args.insert(strata_args.end(), {"--set", assignment});
  if (instrumentation.profile) strata_args.push_back("--profile");
  if (!instrumentation.trace.empty()) strata_args.insert(strata_args.end(), {"--trace", instrumentation.trace});
  if (!instrumentation.trace_steps.empty()) {
    strata_args.insert(strata_args.end(), {"--trace-steps", instrumentation.trace_steps});
  }
  if (!instrumentation.capture_graph.empty()) {
    strata_args.insert(strata_args.end(), {"--capture-graph", instrumentation.capture_graph});
  }
  std::vector<std::string> args = mpirun_command(ranks, strata_args);
  std::string shown;
  for (const std::string& arg : args) shown += (shown.empty() ? "" : " ") + arg;
  fmt::print("launching: {}\n", shown);
  std::fflush(stdout);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  unblock_stop_signals();  // mpirun must take Ctrl-C and SIGTERM itself (exec keeps the mask)
  ::execv(args[0].c_str(), argv.data());
  fail("--nproc: could not start {}: {}", args[0], std::strerror(errno));
}

// Returns the signal that stopped the run early (its checkpoint saved), or 0.
int train(const TrainConfig& given, const Instrumentation& instrumentation) {
  if (!launched_by_mpirun()) {
    const MeshShape mesh = given.mesh();
    for (const ParallelDimension& dimension : parallel_dimensions()) {
      if (const int degree = mesh.degree(dimension.name); degree > 1) {
        fail("key 'parallel.{}' is {} but this is one process: launch with `mpirun -np {} strata train ...` or add "
             "`--nproc {}`",
             dimension.name, degree, mesh.size(), mesh.size());
      }
    }
    Trainer trainer(given);
    return run_instrumented(trainer, given, instrumentation);
  }
  comm::MpiSession mpi;
  comm::Communicator world = comm::Communicator::world();
  TrainConfig config = given;
  if (config.plan == "auto") {
    // The planner picks the mesh for the ranks launched; every rank computes the same pick.
    int ranks_here = 0;
    for (int rank = 0; rank < world.size(); ++rank) ranks_here += world.node_of(rank) == world.node_of(world.rank());
    choose_auto_layout(config, world.size(), world.size() > 1 ? threads_per_rank(config, ranks_here) : 0);
  }
  DeviceMesh mesh(world, config.mesh_for(world.size()));
  MeshGroupsRegistration groups(mesh);  // the collective ops of a tensor-parallel graph run over these
  Trainer trainer(config, &mesh);
  return run_instrumented(trainer, config, instrumentation);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* command = app.add_subcommand("train", "Train a model from a TOML config");
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  command->add_option("config", *config_path, "TOML config file")->required();
  command->add_option("--set", *overrides, "Override a config key: --set train.lr=3e-4 (repeatable)");
  auto instrumentation = std::make_shared<Instrumentation>();
  command->add_flag("--profile", instrumentation->profile,
                    "Time every kernel and print the time per op type at the end");
  command->add_option("--trace", instrumentation->trace,
                      "Write a Chrome trace-event timeline (Perfetto, chrome://tracing) of the traced steps to FILE "
                      "(every rank's kernels, collectives, data, optimizer, checkpoint) and print a gap analysis "
                      "per step");
  command->add_option("--trace-steps", instrumentation->trace_steps,
                      "With --trace: the steps A:B to trace, A to B-1 as metrics.jsonl numbers them (A: to the "
                      "end; default: every step of the run)");
  command->add_option("--capture-graph", instrumentation->capture_graph,
                      "Write every graph tensor of the first step's first micro-batch to DIR, one file per "
                      "tensor-parallel and pipeline rank (what strata compare runs a parallel layout with)");
  auto nproc = std::make_shared<int>(0);
  command->add_option("--nproc", *nproc, "Run as N data-parallel ranks on this host (starts mpirun)")
      ->check(CLI::PositiveNumber);
  command->callback([config_path, overrides, instrumentation, nproc] {
    TrainConfig config = load_train_config(*config_path, *overrides);  // bad configs fail before any launch
    if (!instrumentation->trace_steps.empty()) {
      if (instrumentation->trace.empty()) fail("--trace-steps needs --trace FILE");
      parse_trace_steps(instrumentation->trace_steps);  // bad ranges fail before any launch
    }
    if (*nproc > 0) exec_under_mpirun(*nproc, *config_path, *overrides, *instrumentation);
    // As a process killed by the signal would report it (shells, schedulers): 128 + its number.
    if (int signal = train(config, *instrumentation); signal != 0) std::exit(128 + signal);
  });
}

}  // namespace strata::cli
