#pragma once
// Reading another process's memory on the same host (Linux cross-memory
// attach), for the direct algorithms.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace strata::comm {

// Reads `bytes` at `address` in process `pid` into `target`; returns errno, or 0.
int read_remote(pid_t pid, uint64_t address, void* target, size_t bytes);
// This process's id, read once (getpid is a system call on every call in current glibc).
pid_t own_pid();

}  // namespace strata::comm
