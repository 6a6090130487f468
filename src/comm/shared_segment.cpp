#include "comm/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "comm/cross_memory.h"
#include "core/file_io.h"

namespace strata::comm {

namespace {

constexpr size_t kPage = 4096;

size_t page_floor(size_t bytes) { return bytes / kPage * kPage; }
size_t page_ceil(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

}  // namespace

std::unique_ptr<SharedSegment> SharedSegment::map(const std::string& name, bool create, int ranks,
                                                  size_t slot_bytes, size_t staging_bytes) {
  size_t table_bytes = (static_cast<size_t>(ranks) * sizeof(ExchangeBlock) + kLine - 1) / kLine * kLine;
  size_t used = kHeaderBytes + kSlots * (kLine + slot_bytes) + table_bytes + staging_bytes;
  size_t part_bytes = page_ceil(used);
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
      new SharedSegment(static_cast<std::byte*>(base), bytes, ranks, slot_bytes, part_bytes, staging_bytes));
}

SharedSegment::~SharedSegment() { munmap(base_, bytes_); }

void SharedSegment::touch(int rank) {
  backed_ = std::min(staging_bytes_, kPrefaultedStagingBytes);
  std::byte* first = part(rank) + kHeaderBytes;
  std::memset(first, 0, static_cast<size_t>(staged_data(rank) + backed_ - first));
}

size_t SharedSegment::staging_room(int rank, size_t wanted) {
  if (wanted <= backed_ || backed_ == staging_bytes_) return backed_;
  // Grown at least twofold, so a run of growing exchanges allocates a few times, not every call.
  const size_t target = std::min(staging_bytes_, std::max(wanted, 2 * backed_));
  const size_t from = page_floor(static_cast<size_t>(staged_data(rank) - base_) + backed_);
  const size_t to = page_ceil(static_cast<size_t>(staged_data(rank) - base_) + target);
  // Allocated by the kernel up front: an exhausted /dev/shm fails here rather than with a SIGBUS on first touch.
  if (madvise(base_ + from, to - from, MADV_POPULATE_WRITE) == 0) {
    backed_ = target;
  } else {
    // The pages it did allocate would hold /dev/shm full for everyone else: give them back (none is in use).
    const size_t kept = page_ceil(static_cast<size_t>(staged_data(rank) - base_) + backed_);
    if (to > kept) madvise(base_ + kept, to - kept, MADV_REMOVE);
  }
  return backed_;
}

SharedSegment::CallHeader& SharedSegment::write_header(int rank, const Fingerprint& call, const void* input,
                                                       size_t input_width) const {
  CallHeader& mine = header(rank);
  mine.call = call;
  mine.input_address = reinterpret_cast<uint64_t>(input);
  mine.input_width = input_width;
  mine.pid = own_pid();
  mine.staged = 0;
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
