#pragma once
// Parses the command line and runs the chosen subcommand; every user-facing
// failure (a strata::Error) is printed as one line and exits 1, anything else
// unexpected exits 2. Shared by `strata` and the comm-only `strata-comm`.
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "core/error.h"

namespace strata::cli {

inline int run_app(CLI::App& app, int argc, char** argv) {
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

}  // namespace strata::cli
