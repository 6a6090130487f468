#pragma once
// Running another program and waiting for it: for the commands that hand work to one (`strata
// report` to its Python renderer, `strata compare` to `strata train` under mpirun).
#include <string>
#include <vector>

namespace strata {

// The exit status of a program that could not be started, as a shell reports it.
inline constexpr int kProgramNotFound = 127;

struct ProcessOutcome {
  int exit_status = 0;  // 128 + signal when a signal ended it; kProgramNotFound when it never started
  std::string output;   // its stdout, and its stderr too when asked
};

// The Python interpreters to try for a command's Python part, in order: $STRATA_PYTHON alone when
// set; else the PATH's python3, then Debian's own (where apt puts python3-* modules), since the
// PATH's may be a pyenv or venv interpreter without them.
std::vector<std::string> python_interpreters();

// Runs argv[0] (looked up on the PATH) with `argv` and waits for it. Its stdout is returned;
// its stderr too with `capture_stderr`, else it goes where this process's goes.
ProcessOutcome run_process(const std::vector<std::string>& argv, bool capture_stderr);

}  // namespace strata
