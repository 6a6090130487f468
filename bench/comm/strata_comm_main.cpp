// strata-comm: `strata topo` and `strata comm-bench` without the rest of the stack.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"strata-comm: Strata's topo and comm-bench commands on their own"};
  app.require_subcommand(1);
  strata::cli::add_topo_command(app);
  strata::cli::add_comm_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const strata::Error& error) {
    fmt::print(stderr, "error: {}\n", error.what());
    return 1;
  }
  return 0;
}
