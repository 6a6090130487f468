// strata comm-bench: collective bandwidth in the manner of nccl-tests (see
// comm/bench.h); launch with mpirun. Rank 0 prints the table.
#include <fmt/core.h>

#include "cli/commands.h"
#include "comm/bench.h"
#include "comm/cluster_file.h"
#include "comm/mpi_session.h"
#include "core/error.h"
#include "core/file_io.h"

namespace strata::cli {
namespace {

struct BenchArgs {
  std::string op = "all_reduce";
  std::string dtype = "f32";
  std::string reduce = "sum";
  std::string min_bytes = "4K";
  std::string max_bytes = "256M";
  double factor = 2.0;
  int warmup = 2;
  int iters = 10;
  int rounds = 5;
  std::vector<std::string> algorithms = {"auto", "baseline", "baseline-blocking"};
  int root = 0;
  double skew = 0.0;
  bool in_place = false;
  std::string input = "reused";
  bool check_cost = false;
  bool breakdown = false;
  std::string json;
  bool calibrate = false;
  std::string calibrate_file;
};

// Fits the model's per-algorithm scales to the measurements. Without a file
// they go into the probe cache this job used, so later runs choose with them.
void calibrate(const comm::Communicator& world, const comm::BenchReport& report, const std::string& file) {
  const comm::LinkSource& source = world.link_source();
  comm::ClusterDescription description;
  std::string target = file;
  if (target.empty()) {
    if (source.kind == "file") {
      fail("--calibrate: the links come from {}; give a file to write a calibrated copy to", source.path);
    }
    target = source.path;
    description = comm::load_cluster_description(target);
  } else {
    description.topology = world.topology();
    description.topology.node_of_rank.clear();
    description.calibration = world.model().calibration;
  }
  for (size_t index : comm::fit_calibration(report, description.calibration)) {
    const comm::BenchRow& row = report.rows[index];
    fmt::print("# calibration left out {} at {} bytes: its rounds spread {:.0f}% (median {:.1f} us, {} rounds)\n", row.ran,
               row.bytes, comm::round_spread(row) * 100.0, row.time_us, row.round_us.size());
  }
  comm::save_cluster_description(target, description);
  fmt::print("# calibration written to {}{}\n", target,
             file.empty() ? " (the probe cache: later runs use it)" : " (use it with STRATA_COMM_TOPOLOGY)");
}

void bench(const BenchArgs& args) {
  comm::BenchOptions options;
  options.op = comm::parse_collective(args.op, "--op");
  options.dtype = parse_dtype(args.dtype);
  options.reduce = comm::parse_reduce_op(args.reduce, "--reduce");
  options.min_bytes = comm::parse_size(args.min_bytes, "--minbytes");
  options.max_bytes = comm::parse_size(args.max_bytes, "--maxbytes");
  options.factor = args.factor;
  options.warmup = args.warmup;
  options.iters = args.iters;
  options.rounds = args.rounds;
  options.algorithms = args.algorithms;
  options.root = args.root;
  options.skew = args.skew;
  options.in_place = args.in_place;
  options.fresh_input = args.input == "fresh";
  options.check_cost = args.check_cost;
  options.breakdown = args.breakdown;

  comm::MpiSession mpi;
  comm::Communicator world = comm::Communicator::world();
  comm::BenchReport report = comm::run_bench(world, options);
  if (world.rank() != 0) return;
  fmt::print("{}", comm::format_table(report));
  if (!args.json.empty()) write_file_atomic(args.json, comm::format_json(report));
  if (args.calibrate) calibrate(world, report, args.calibrate_file);
}

}  // namespace

void add_comm_bench_command(CLI::App& app) {
  auto* command = app.add_subcommand("comm-bench", "Benchmark collectives like nccl-tests (run under mpirun)");
  auto args = std::make_shared<BenchArgs>();
  command->add_option("-o,--op", args->op, "all_reduce, reduce_scatter, all_gather, broadcast, all_to_all or all_to_all_v");
  command->add_option("-d,--dtype", args->dtype, "f32 or bf16");
  command->add_option("-r,--reduce", args->reduce, "sum, avg or max");
  command->add_option("-b,--minbytes", args->min_bytes, "Smallest size (K, M, G suffixes)");
  command->add_option("-e,--maxbytes", args->max_bytes, "Largest size");
  command->add_option("-f,--stepfactor", args->factor, "Multiply the size by this")->check(CLI::PositiveNumber);
  command->add_option("-w,--warmup", args->warmup, "Warm-up iterations per size and algorithm");
  command->add_option("-n,--iters", args->iters, "Timed iterations per round")->check(CLI::PositiveNumber);
  command->add_option("--rounds", args->rounds, "Rounds, each over every size and algorithm (the median is reported, the spread shown)")->check(CLI::PositiveNumber);
  command->add_option("-a,--algorithms", args->algorithms,
                      "Comma list: auto, ring, rhd, recursive_doubling, binomial, hierarchical, shm, direct, direct_split, pairwise, mpi, baseline (MPI's non-blocking collective, polled with the timeout), baseline-blocking (MPI's blocking call, as a plain MPI program makes it)")
      ->delimiter(',');
  command->add_option("--root", args->root, "Broadcast root");
  command->add_option("--skew", args->skew,
                      "all_to_all_v: every rank sends rank j a share 1/(j+1)^skew of its buffer (0: equal shares)");
  command->add_flag("--in-place", args->in_place, "all_reduce in place");
  command->add_option("--input", args->input,
                      "reused: every call sends the same input (nccl-tests' way); fresh: each input is written again "
                      "before its call (untimed), as a training step sends what it has just computed")
      ->check(CLI::IsMember({"reused", "fresh"}));
  command->add_flag("--check-cost", args->check_cost,
                    "Also run each algorithm with the call check off (rows marked unchecked): what the check costs");
  command->add_flag("--breakdown", args->breakdown,
                    "Also time each algorithm's calls phase by phase (entry, launch, first step, progress, wake-up, "
                    "and the call check inside them): where the latency goes");
  command->add_option("--json", args->json, "Also write the results as JSON here");
  auto* calibrate = command->add_option(
      "--calibrate", args->calibrate_file,
      "Fit per-algorithm latency/bandwidth scales to the results; store them in the probe cache, or in FILE");
  calibrate->expected(0, 1);
  command->callback([args, calibrate] {
    args->calibrate = calibrate->count() > 0;
    bench(*args);
  });
}

}  // namespace strata::cli
