#pragma once
// Runs the real `strata` executable (STRATA_EXECUTABLE) with a shell-quoted
// argument string and returns its exit code and output.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace strata::testing {

struct StrataRun {
  int exit_code;
  std::string output;
};

// stdout, and stderr too unless `with_stderr` is false; `environment`: "NAME=value ..." set for the run.
inline StrataRun run_strata(const std::string& arguments, bool with_stderr = true, const std::string& environment = "") {
  std::string command = (environment.empty() ? "" : "env " + environment + " ") + std::string(STRATA_EXECUTABLE) + " " +
                        arguments + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t read = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, read);
  int status = pclose(pipe);
  return {WEXITSTATUS(status), output};
}

}  // namespace strata::testing
