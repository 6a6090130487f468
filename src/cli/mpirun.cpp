#include "cli/mpirun.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "core/error.h"

namespace strata::cli {

namespace {

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    std::filesystem::path candidate = std::filesystem::path(dirs.substr(start, end - start)) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

}  // namespace

bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

std::string this_executable() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& strata_args) {
  const std::string mpirun = find_on_path("mpirun");
  if (mpirun.empty()) fail("starting {} ranks needs mpirun on PATH (Debian: apt-get install openmpi-bin)", ranks);
  std::vector<std::string> command{mpirun, "-np", std::to_string(ranks)};
  // Threads of a rank must not be pinned to one core (OpenMPI binds to a core by default).
  command.insert(command.end(), {"--bind-to", "none"});
  if (ranks > static_cast<int>(std::thread::hardware_concurrency())) command.push_back("--oversubscribe");
  if (::geteuid() == 0) command.push_back("--allow-run-as-root");
  command.push_back(this_executable());
  command.insert(command.end(), strata_args.begin(), strata_args.end());
  return command;
}

}  // namespace strata::cli
