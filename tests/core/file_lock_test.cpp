// The run-directory lock: a second holder is refused at once, naming the
// holder's pid; the lock goes with its holder, even one that was killed.
#include "core/file_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "support/error_text.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path fresh_directory(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("strata_lock_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

TEST(DirectoryLock, ASecondHolderIsRefusedNamingTheFirstOnesPid) {
  fs::path dir = fresh_directory("twice");
  {
    DirectoryLock first(dir / "run", "run directory");
    std::string message = testing::error_of([&] { DirectoryLock second(dir / "run", "run directory"); });
    EXPECT_THAT(message, HasSubstr("run directory '" + (dir / "run").string() + "' is in use by another strata "
                                   "process (pid " + std::to_string(::getpid()) + ")"));
  }
  DirectoryLock again(dir / "run", "run directory");  // released with its holder
  fs::remove_all(dir);
}

TEST(DirectoryLock, AKilledHolderLeavesNoStaleLock) {
  fs::path dir = fresh_directory("killed");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    DirectoryLock held(dir, "run directory");
    char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) _exit(1);
    ::pause();
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  EXPECT_THAT(testing::error_of([&] { DirectoryLock taken(dir, "run directory"); }),
              HasSubstr("pid " + std::to_string(child)));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  DirectoryLock mine(dir, "run directory");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
