#include "comm/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "comm/cross_memory.h"
#include "core/file_io.h"

namespace strata::comm {

std::unique_ptr<SharedSegment> SharedSegment::map(const std::string& name, bool create, int ranks,
                                                  size_t slot_bytes) {
  constexpr size_t kPage = 4096;
  size_t table_bytes = (static_cast<size_t>(ranks) * sizeof(ExchangeBlock) + kLine - 1) / kLine * kLine;
  size_t used = kHeaderBytes + kSlots * (kLine + slot_bytes) + table_bytes + kStagedBytes;
  size_t part_bytes = (used + kPage - 1) / kPage * kPage;
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

SharedSegment::CallHeader& SharedSegment::write_header(int rank, const Fingerprint& call, const void* input,
                                                       size_t input_width) const {
  CallHeader& mine = header(rank);
  mine.call = call;
  mine.input_address = reinterpret_cast<uint64_t>(input);
  mine.input_width = input_width;
  mine.pid = own_pid();
  return mine;
}

void SharedSegment::read_peer(const Operation& op, const Channel& channel, int rank, uint64_t address, void* target,
                              size_t bytes, const char* what) const {
  const CallHeader& theirs = header(rank);
  int error = read_remote(static_cast<pid_t>(theirs.pid), address, target, bytes);
  if (error != 0) {
    op.abort_with(fmt::format("cannot read the {} of {} (pid {}): {}", what, peer_label(channel, rank), theirs.pid,
                              errno_text(error)));
  }
}

void SharedSegment::label(int rank, uint64_t chunk, const Fingerprint& call) const {
  *reinterpret_cast<Fingerprint*>(slot_base(rank, chunk)) = call;
}

namespace {

// Aborts `op` naming every rank's call unless `call_of` gives the same call for all ranks.
template <typename CallOf>
void require_same_call(const Operation& op, int ranks, CallOf call_of) {
  bool same = true;
  for (int rank = 1; rank < ranks; ++rank) same = same && call_of(rank) == call_of(0);
  if (same) return;
  std::vector<Fingerprint> calls;
  for (int rank = 0; rank < ranks; ++rank) calls.push_back(call_of(rank));
  op.abort_with(fmt::format("the ranks disagree about this call: {}", describe_disagreement(calls)));
}

}  // namespace

void SharedSegment::check_same_call(const Operation& op, uint64_t chunk) const {
  require_same_call(op, ranks_, [&](int rank) { return *reinterpret_cast<const Fingerprint*>(slot_base(rank, chunk)); });
}

void SharedSegment::check_same_header(const Operation& op) const {
  require_same_call(op, ranks_, [&](int rank) { return header(rank).call; });
}

uint64_t CounterWait::value(int rank) const {
  return segment_.counter(rank, which_).load(std::memory_order_acquire);
}

bool CounterWait::poll(bool) {
  if (ignored_) {
    for (int rank = 0; rank < segment_.ranks(); ++rank) {
      if (waits_for(rank) && value(rank) >= target_) return true;
    }
    return false;
  }
  for (int rank = 0; rank < segment_.ranks(); ++rank) {
    if (value(rank) < target_) return false;
  }
  return true;
}

std::string CounterWait::pending_peers() const {
  std::string text;
  for (int rank = 0; rank < segment_.ranks(); ++rank) {
    if (!waits_for(rank) || value(rank) >= target_) continue;
    const char* what = which_ == Counter::Published  ? "to publish chunk"
                       : which_ == Counter::Consumed ? "to finish reading chunk"
                       : which_ == Counter::Entered  ? "to enter call #"
                       : which_ == Counter::Reduced  ? "to reduce its slice of call #"
                                                     : "to finish reading the inputs of call #";
    text += fmt::format("{}{} {}{} in shared memory", text.empty() ? "" : ", ", peer_label(channel_, rank), what,
                        which_ == Counter::Published || which_ == Counter::Consumed ? target_ - 1 : target_);
  }
  return text.empty() ? "nothing (internal error)" : text;
}

}  // namespace strata::comm
