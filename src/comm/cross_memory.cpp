#include "comm/cross_memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

namespace strata::comm {

int read_remote(pid_t pid, uint64_t address, void* target, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<std::byte*>(target) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;
    done += static_cast<size_t>(got);
  }
  return 0;
}

pid_t own_pid() {
  static const pid_t pid = getpid();
  return pid;
}

}  // namespace strata::comm
