#pragma once
// A shared-memory segment for the ranks of one group on one host (POSIX shm,
// unlinked as soon as every rank has mapped it, so nothing is left behind and
// releasing it is a local munmap that cannot hang). Each rank owns a few
// chunk-sized slots that the others read, and two counters that only it
// writes: chunks published (copied into its slot) and chunks consumed (reduced
// by it); operations number chunks globally, in call order, so these only grow.
// Each slot carries the call it belongs to (sequence number and count), so
// ranks that disagree about a call are caught instead of mixing data.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/engine.h"

namespace strata::comm {

class SharedSegment {
 public:
  static constexpr int kSlots = 4;

  // Maps `name` (rank 0 creates it, sized for `ranks`). Null when that fails.
  static std::unique_ptr<SharedSegment> map(const std::string& name, bool create, int ranks, size_t slot_bytes);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  int ranks() const { return ranks_; }
  size_t slot_bytes() const { return slot_bytes_; }
  std::atomic<uint64_t>& published(int rank) const { return counters(rank)[0]; }
  std::atomic<uint64_t>& consumed(int rank) const { return counters(rank)[kLine / sizeof(uint64_t)]; }
  float* slot(int rank, uint64_t chunk) const { return reinterpret_cast<float*>(slot_base(rank, chunk) + kLine); }
  // Labels this rank's slot of `chunk` with its call, before publishing it.
  void label(int rank, uint64_t chunk, uint64_t sequence, uint64_t count) const;
  // After every rank published `chunk`: aborts `op` unless all slots carry the same call.
  void check_same_call(const Operation& op, const Channel& channel, uint64_t chunk) const;
  // Touches this rank's part once, so later copies do not pay first-touch faults.
  void touch(int rank) const;

 private:
  static constexpr size_t kLine = 64;  // counters on their own cache lines
  SharedSegment(std::byte* base, size_t bytes, int ranks, size_t slot_bytes, size_t part_bytes)
      : base_(base), bytes_(bytes), ranks_(ranks), slot_bytes_(slot_bytes), part_bytes_(part_bytes) {}
  std::byte* part(int rank) const { return base_ + static_cast<size_t>(rank) * part_bytes_; }
  std::byte* slot_base(int rank, uint64_t chunk) const {
    return part(rank) + 2 * kLine + (chunk % kSlots) * (kLine + slot_bytes_);
  }
  std::atomic<uint64_t>* counters(int rank) const { return reinterpret_cast<std::atomic<uint64_t>*>(part(rank)); }

  std::byte* base_;
  size_t bytes_;
  int ranks_;
  size_t slot_bytes_;
  size_t part_bytes_;
};

// Waits until every rank's counter (published or consumed) reaches a target.
class CounterWait : public Waitable {
 public:
  CounterWait(Operation& op, const SharedSegment& segment, const Channel& channel, bool consumed)
      : op_(op), segment_(segment), channel_(channel), consumed_(consumed) {}
  bool poll(bool all) override;
  std::string pending_peers() const override;

  struct Wait {
    CounterWait& wait;
    bool await_ready() { return wait.poll(true); }
    void await_suspend(std::coroutine_handle<> resume_point) { wait.op_.suspend_on(&wait, true, resume_point); }
    void await_resume() const noexcept {}
  };
  // co_await until(n): every rank's counter >= n.
  Wait until(uint64_t target) {
    target_ = target;
    return {*this};
  }

 private:
  uint64_t value(int rank) const;
  Operation& op_;
  const SharedSegment& segment_;
  const Channel& channel_;
  bool consumed_;
  uint64_t target_ = 0;
};

}  // namespace strata::comm
