#include "core/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"

namespace strata {

namespace {

constexpr const char* kLockFile = ".lock";

std::string holder_of(int fd) {
  char buffer[32] = {};
  ssize_t length = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  std::string pid = length > 0 ? std::string(buffer, static_cast<size_t>(length)) : "";
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "unknown" : pid;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::filesystem::path& directory, const std::string& what) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) fail("cannot create {} '{}': {}", what, directory.string(), error.message());
  const std::filesystem::path path = directory / kLockFile;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot open '{}' to lock the {}: {}", path.string(), what, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int code = errno;
    std::string holder = holder_of(fd_);
    ::close(fd_);
    fd_ = -1;
    if (code == EWOULDBLOCK) {
      fail("{} '{}' is in use by another strata process (pid {}): two runs cannot share it", what,
           directory.string(), holder);
    }
    fail("cannot lock '{}': {}", path.string(), std::strerror(code));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    fail("cannot write '{}': {}", path.string(), std::strerror(errno));
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace strata
