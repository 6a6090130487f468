#include "core/subprocess.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "core/error.h"
#include "core/file_io.h"

extern char** environ;

namespace strata {

ProcessOutcome run_process(const std::vector<std::string>& argv, bool capture_stderr) {
  STRATA_CHECK(!argv.empty(), "no program to run");
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) fail("cannot create a pipe to run '{}': {}", argv[0], errno_text(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
  if (capture_stderr) posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
  std::vector<std::string> args = argv;
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  pid_t child = 0;
  const int spawned = posix_spawnp(&child, args[0].c_str(), &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_ends[1]);
  ProcessOutcome outcome;
  if (spawned != 0) {
    close(pipe_ends[0]);
    outcome.exit_status = kProgramNotFound;
    return outcome;
  }
  char buffer[1 << 16];
  for (ssize_t got; (got = read(pipe_ends[0], buffer, sizeof buffer)) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    outcome.output.append(buffer, static_cast<size_t>(got));
  }
  close(pipe_ends[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  outcome.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return outcome;
}

std::vector<std::string> python_interpreters() {
  const char* chosen = std::getenv("STRATA_PYTHON");
  if (chosen != nullptr && *chosen != '\0') return {chosen};
  return {"python3", "/usr/bin/python3"};
}

}  // namespace strata
