#include "report/html_renderer.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/file_io.h"
#include "report/render_script.h"

extern char** environ;

namespace strata {

namespace {

// The renderer's exit status when it cannot import matplotlib.
constexpr int kMissingMatplotlib = 3;
constexpr int kNotFound = 127;

// A scratch directory removed when it goes out of scope, whatever happened.
class ScratchDirectory {
 public:
  ScratchDirectory() : path_(create_unique_directory(std::filesystem::temp_directory_path(), "strata-report")) {}
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// $STRATA_PYTHON alone when set; else the PATH's python3, then Debian's own (where apt puts
// python3-matplotlib), since the PATH's may be a pyenv or venv interpreter without it.
std::vector<std::string> python_interpreters() {
  const char* chosen = std::getenv("STRATA_PYTHON");
  if (chosen != nullptr && *chosen != '\0') return {chosen};
  return {"python3", "/usr/bin/python3"};
}

// Runs `argv` with its stdout read into the returned text; stderr stays the caller's. An
// interpreter that cannot be started exits kNotFound.
std::string run_capturing_stdout(std::vector<std::string> argv, int& exit_status) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) fail("strata report: cannot create a pipe: {}", errno_text(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
  std::vector<char*> pointers;
  for (std::string& arg : argv) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  pid_t child = 0;
  const int spawned = posix_spawnp(&child, argv[0].c_str(), &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_ends[1]);
  if (spawned != 0) {  // no such interpreter: as a shell says it
    close(pipe_ends[0]);
    exit_status = kNotFound;
    return "";
  }
  std::string output;
  char buffer[1 << 16];
  for (ssize_t got; (got = read(pipe_ends[0], buffer, sizeof buffer)) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    output.append(buffer, static_cast<size_t>(got));
  }
  close(pipe_ends[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return output;
}

}  // namespace

std::string render_report_html(const nlohmann::json& document) {
  ScratchDirectory scratch;
  const std::filesystem::path document_path = scratch.path() / "report.json";
  write_file_atomic(document_path, document.dump());
  const std::vector<std::string> interpreters = python_interpreters();
  for (const std::string& python : interpreters) {
    int status = 0;
    std::string html =
        run_capturing_stdout({python, "-c", std::string(kRenderReportScript), document_path.string()}, status);
    if (status == kMissingMatplotlib || status == kNotFound) continue;
    if (status != 0) {
      fail("strata report: the renderer ('{}' running render_report.py) failed with status {} (its message is above)",
           python, status);
    }
    return html;
  }
  fail("strata report draws its plots with matplotlib, which no Python tried ({}) can run: install it (Debian: "
       "apt-get install python3-matplotlib) or set STRATA_PYTHON to a Python that has it",
       fmt::join(interpreters, ", "));
}

}  // namespace strata
