#include "comm/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

namespace strata::comm {

std::unique_ptr<SharedSegment> SharedSegment::map(const std::string& name, bool create, int ranks,
                                                  size_t slot_bytes) {
  constexpr size_t kPage = 4096;
  size_t part_bytes = (kHeaderBytes + kSlots * (kLine + slot_bytes) + kPage - 1) / kPage * kPage;
  size_t bytes = part_bytes * static_cast<size_t>(ranks);
  int fd = shm_open(name.c_str(), create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
  if (fd < 0) return nullptr;
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return nullptr;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return nullptr;
  return std::unique_ptr<SharedSegment>(
      new SharedSegment(static_cast<std::byte*>(base), bytes, ranks, slot_bytes, part_bytes));
}

SharedSegment::~SharedSegment() { munmap(base_, bytes_); }

void SharedSegment::touch(int rank) const {
  std::memset(part(rank) + kHeaderBytes, 0, part_bytes_ - kHeaderBytes);
}

void SharedSegment::label(int rank, uint64_t chunk, uint64_t sequence, uint64_t count) const {
  uint64_t* header = reinterpret_cast<uint64_t*>(slot_base(rank, chunk));
  header[0] = sequence;
  header[1] = count;
}

void SharedSegment::check_same_call(const Operation& op, const Channel& channel, uint64_t chunk) const {
  const uint64_t* mine = reinterpret_cast<const uint64_t*>(slot_base(channel.rank, chunk));
  for (int rank = 0; rank < ranks_; ++rank) {
    const uint64_t* theirs = reinterpret_cast<const uint64_t*>(slot_base(rank, chunk));
    if (theirs[0] == mine[0] && theirs[1] == mine[1]) continue;
    int world = channel.world_rank[static_cast<size_t>(rank)];
    op.abort_with(fmt::format("peer rank {} (world rank {} on {}) is in call #{} with {} elements, this rank in call "
                              "#{} with {}: the ranks disagree about this call (STRATA_COMM_CHECK=before names the "
                              "difference)",
                              channel.group_rank[static_cast<size_t>(rank)], world, world_hostname(world), theirs[0],
                              theirs[1], mine[0], mine[1]));
  }
}

uint64_t CounterWait::value(int rank) const {
  return segment_.counter(rank, which_).load(std::memory_order_acquire);
}

bool CounterWait::poll(bool) {
  for (int rank = 0; rank < segment_.ranks(); ++rank) {
    if (value(rank) < target_) return false;
  }
  return true;
}

std::string CounterWait::pending_peers() const {
  std::string text;
  for (int rank = 0; rank < segment_.ranks(); ++rank) {
    if (value(rank) >= target_) continue;
    int world = channel_.world_rank[static_cast<size_t>(rank)];
    const char* what = which_ == Counter::Published  ? "to publish chunk"
                       : which_ == Counter::Consumed ? "to finish reading chunk"
                       : which_ == Counter::Entered  ? "to enter call #"
                                                     : "to finish reading the inputs of call #";
    text += fmt::format("{}peer rank {} (world rank {} on {}) {}{} in shared memory", text.empty() ? "" : ", ",
                        channel_.group_rank[static_cast<size_t>(rank)], world, world_hostname(world), what,
                        which_ == Counter::Published || which_ == Counter::Consumed ? target_ - 1 : target_);
  }
  return text.empty() ? "nothing (internal error)" : text;
}

}  // namespace strata::comm
