// strata calibrate: measures this machine for the planner (planner/calibrate.h)
// and writes it as a cluster file (configs/clusters/' format, the device
// measured) that `strata plan` and `parallel.cluster` read.
// Compute in one process; links with `mpirun -np 2 strata calibrate --links`,
// which adds them to an existing profile.
#include <fmt/core.h>

#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "comm/mpi_session.h"
#include "planner/calibrate.h"

namespace strata::cli {

namespace {

struct CalibrateArgs {
  std::string out = "calibrated-cluster.toml";
  std::string backend = "cpu";
  std::vector<int> threads;
  std::vector<std::string> dtypes = {"f32", "bf16"};
  double budget = 0.15;
  bool links = false;
};

bool launched_by_mpirun() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

void calibrate_links_into(const CalibrateArgs& args) {
  comm::MpiSession mpi;
  comm::Communicator world = comm::Communicator::world();
  LinkProfile links = calibrate_links(world);
  if (world.rank() != 0) return;
  if (!std::filesystem::exists(args.out)) {
    fail("{} does not exist: run `strata calibrate --out {}` (one process) first, then add the links", args.out,
         args.out);
  }
  HardwareProfile profile = load_profile(args.out);
  profile.links = links;
  save_profile(args.out, profile);
  fmt::print("links of {} processes on {} node(s): latency {:.2f} us, bandwidth {:.2f} GB/s, reduce {:.2f} GB/s\n",
             links.ranks, links.nodes, links.intra_latency_s * 1e6, links.intra_bandwidth_Bps / 1e9,
             links.reduce_Bps / 1e9);
  fmt::print("added to {}\n", args.out);
}

void calibrate(const CalibrateArgs& args) {
  if (args.links) {
    calibrate_links_into(args);
    return;
  }
  if (launched_by_mpirun()) {
    fail("compute calibration runs as one process (processes would share the cores); use --links under mpirun");
  }
  CalibrationOptions options;
  options.backend = args.backend;
  options.threads = args.threads;
  options.dtypes.clear();
  for (const std::string& name : args.dtypes) options.dtypes.push_back(parse_dtype(name));
  options.seconds_per_kernel = args.budget;
  std::vector<std::string> skipped;
  HardwareProfile profile = calibrate_compute(
      options, [](const std::string& line) { fmt::print("{}\n", line); }, skipped);
  for (const std::string& line : skipped) fmt::print("skipped {}\n", line);
  if (std::filesystem::exists(args.out)) {
    try {
      profile.links = load_profile(args.out).links;  // keep links measured earlier
    } catch (const Error&) {
      // an unreadable old file is simply replaced
    }
  }
  save_profile(args.out, profile);
  fmt::print("wrote {}{}\n", args.out,
             profile.links ? "" : " (no link figures: add them with `mpirun -np 2 strata calibrate --links`)");
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto* command = app.add_subcommand("calibrate", "Measure this machine for the planner and write it as a cluster file");
  auto args = std::make_shared<CalibrateArgs>();
  command->add_option("--out", args->out, "Cluster file to write (TOML, configs/clusters/' format with a [measured] device)");
  command->add_option("--backend", args->backend, "Backend whose kernels are measured");
  command->add_option("--threads", args->threads, "Thread counts to measure (default: 1 and every core)")
      ->delimiter(',');
  command->add_option("--dtypes", args->dtypes, "Dtypes to measure (those without native kernels are skipped)")
      ->delimiter(',');
  command->add_option("--budget", args->budget, "Seconds spent timing each kernel")->check(CLI::PositiveNumber);
  command->add_flag("--links", args->links,
                    "Under mpirun: measure collective latency and bandwidth and add them to --out");
  command->callback([args] { calibrate(*args); });
}

}  // namespace strata::cli
