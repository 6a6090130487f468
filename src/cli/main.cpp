// strata: the command-line entry point. Subcommands register themselves from
// commands.h; every user-facing failure is a strata::Error printed as one line.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Strata: train transformers on any platform by changing configuration, not code"};
  app.require_subcommand(1);
  strata::cli::add_train_command(app);
  strata::cli::add_sample_command(app);
  strata::cli::add_data_command(app);
  strata::cli::add_topo_command(app);
  strata::cli::add_comm_bench_command(app);
  strata::cli::add_plan_command(app);
  strata::cli::add_calibrate_command(app);
  strata::cli::add_ops_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const strata::Error& error) {
    fmt::print(stderr, "error: {}\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    fmt::print(stderr, "error: {}\n", error.what());
    return 2;
  }
  return 0;
}
