#pragma once
// An exclusive, advisory lock on a directory (flock on a `.lock` file in it),
// held for the object's lifetime and released by the kernel when the process
// dies, so a crashed run never leaves a stale lock behind. The file records
// the holder's pid for the error a second process gets.
#include <filesystem>
#include <string>

namespace strata {

class DirectoryLock {
 public:
  // Creates the directory if needed; fails at once, naming `what` (e.g. "run
  // directory"), the directory and the holder's pid, when another process holds it.
  DirectoryLock(const std::filesystem::path& directory, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace strata
