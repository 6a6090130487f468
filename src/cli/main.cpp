// strata: the command-line entry point. Subcommands register themselves from
// commands.h; run_app prints every user-facing failure (a strata::Error) as one line.
#include "cli/commands.h"
#include "cli/run_app.h"
#include "train/stop_signals.h"

int main(int argc, char** argv) {
  strata::route_stop_signals();  // before MPI, OpenMP or oneDNN start threads
  CLI::App app{"Strata: train transformers on any platform by changing configuration, not code"};
  app.require_subcommand(1);
  strata::cli::add_train_command(app);
  strata::cli::add_sample_command(app);
  strata::cli::add_data_command(app);
  strata::cli::add_topo_command(app);
  strata::cli::add_comm_bench_command(app);
  strata::cli::add_plan_command(app);
  strata::cli::add_calibrate_command(app);
  strata::cli::add_fit_device_command(app);
  strata::cli::add_ops_command(app);
  strata::cli::add_ckpt_command(app);
  strata::cli::add_export_command(app);
  strata::cli::add_compare_command(app);
  strata::cli::add_report_command(app);
  strata::cli::add_scan_command(app);
  return strata::cli::run_app(app, argc, argv);
}
