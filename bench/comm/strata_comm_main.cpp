// strata-comm: `strata topo` and `strata comm-bench` without the rest of the stack.
#include "cli/commands.h"
#include "cli/run_app.h"

int main(int argc, char** argv) {
  CLI::App app{"strata-comm: Strata's topo and comm-bench commands on their own"};
  app.require_subcommand(1);
  strata::cli::add_topo_command(app);
  strata::cli::add_comm_bench_command(app);
  return strata::cli::run_app(app, argc, argv);
}
