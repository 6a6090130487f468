#pragma once
// A shared-memory segment for the ranks of one group on one host (POSIX shm,
// unlinked as soon as every rank has mapped it, so nothing is left behind and
// releasing it is a local munmap that cannot hang). Each rank owns a part
// that only it writes: counters, the call it is in, and a few chunk-sized
// slots. Counters only grow: `published`/`consumed` count chunks (numbered
// globally, in call order) copied into this rank's slots / summed by it;
// `entered`/`finished` hold the sequence number of the latest call this rank
// entered / finished reading its peers for. Slots and the call header carry
// the call's whole fingerprint, so ranks that disagree about a call are
// caught (with both calls named) instead of mixing data, and these
// algorithms need no separate check. An all-to-all also stages its small
// blocks in the rank's exchange area, behind its block table.
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/call_check.h"
#include "comm/cost_model.h"
#include "comm/engine.h"

namespace strata::comm {

enum class Counter { Published, Consumed, Entered, Finished, Reduced };

class SharedSegment {
 public:
  static constexpr size_t kSlots = kSharedMemorySlots;

  // Maps `name` (rank 0 creates it, sized for `ranks`, each with an exchange
  // area that stages up to `staging_bytes`). Null when that fails.
  static std::unique_ptr<SharedSegment> map(const std::string& name, bool create, int ranks, size_t slot_bytes,
                                            size_t staging_bytes);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  int ranks() const { return ranks_; }
  size_t slot_bytes() const { return slot_bytes_; }
  std::atomic<uint64_t>& counter(int rank, Counter which) const {
    return *reinterpret_cast<std::atomic<uint64_t>*>(part(rank) + static_cast<size_t>(which) * kLine);
  }
  float* slot(int rank, uint64_t chunk) const { return reinterpret_cast<float*>(slot_base(rank, chunk) + kLine); }
  // Labels this rank's slot of `chunk` with its call, before publishing it.
  void label(int rank, uint64_t chunk, const Fingerprint& call) const;
  // After every rank published `chunk`: aborts `op` unless all slots carry the same call.
  void check_same_call(const Operation& op, uint64_t chunk) const;

  // The call a rank is in, with where its input lives (read by peers through
  // cross-memory attach), written before it bumps `entered`.
  struct CallHeader {
    Fingerprint call;
    uint64_t input_address;
    uint64_t input_width;  // bytes per element: 4 (fp32) or 2 (bf16); any dtype's for all_to_all
    int64_t pid;
    uint64_t output_address;  // direct_split: where the reduced slices are read
    uint64_t staged;          // direct, direct_split: 1 when the input (and reduced slice) are in the exchange area
  };
  static_assert(sizeof(CallHeader) <= 2 * 64, "the call header fills two cache lines");
  CallHeader& header(int rank) const { return *reinterpret_cast<CallHeader*>(part(rank) + 5 * kLine); }
  // Fills `rank`'s header with its call, its input and this process's id.
  CallHeader& write_header(int rank, const Fingerprint& call, const void* input, size_t input_width) const;
  // Reads `bytes` at `address` in the process behind `rank`'s header (cross-memory
  // attach); aborts `op` naming the peer and `what` ("input", ...) when it cannot.
  void read_peer(const Operation& op, const Channel& channel, int rank, uint64_t address, void* target, size_t bytes,
                 const char* what) const;
  // After every rank entered: aborts `op` unless all headers carry the same call.
  void check_same_header(const Operation& op) const;

  // Where an all-to-all sender left its block for one receiver: in its
  // exchange area (staged) or in its input (read by cross-memory attach).
  struct ExchangeBlock {
    uint64_t offset;  // bytes, from the start of the staged data or of the input
    uint64_t bytes;
    uint64_t staged;  // 1: in the exchange area
  };
  ExchangeBlock* exchange_table(int rank) const { return reinterpret_cast<ExchangeBlock*>(area(rank)); }
  std::byte* staged_data(int rank) const { return area(rank) + table_bytes(); }
  // How many bytes `rank` (this process's rank) may stage now: at least
  // `wanted` where the area holds that much and the host's shared memory has
  // room. Pages past those already touched are allocated here (a failure
  // leaves the area as it was, never a SIGBUS in the middle of a copy).
  size_t staging_room(int rank, size_t wanted);

  // Touches this rank's part once (its area's first kPrefaultedStagingBytes),
  // so later copies do not pay first-touch faults.
  void touch(int rank);

 private:
  static constexpr size_t kLine = 64;      // each counter on its own cache line
  static constexpr size_t kHeaderBytes = 7 * kLine;  // five counters, the call header
  size_t table_bytes() const { return (static_cast<size_t>(ranks_) * sizeof(ExchangeBlock) + kLine - 1) / kLine * kLine; }
  std::byte* area(int rank) const { return part(rank) + kHeaderBytes + kSlots * (kLine + slot_bytes_); }
  SharedSegment(std::byte* base, size_t bytes, int ranks, size_t slot_bytes, size_t part_bytes, size_t staging_bytes)
      : base_(base), bytes_(bytes), ranks_(ranks), slot_bytes_(slot_bytes), part_bytes_(part_bytes),
        staging_bytes_(staging_bytes) {}
  std::byte* part(int rank) const { return base_ + static_cast<size_t>(rank) * part_bytes_; }
  std::byte* slot_base(int rank, uint64_t chunk) const {
    return part(rank) + kHeaderBytes + (chunk % kSlots) * (kLine + slot_bytes_);
  }

  std::byte* base_;
  size_t bytes_;
  int ranks_;
  size_t slot_bytes_;
  size_t part_bytes_;
  size_t staging_bytes_;  // the most an exchange area stages
  size_t backed_ = 0;     // bytes of this rank's area touched so far
};

// Waits until `sequence` heads the group's queue of calls that use the
// segment: they take it one at a time, in the order they were started.
class SegmentTurn : public Waitable {
 public:
  SegmentTurn(Operation& op, const std::deque<uint64_t>& queue, uint64_t sequence)
      : op_(op), queue_(queue), sequence_(sequence) {}
  bool poll(bool) override { return queue_.front() == sequence_; }
  std::string pending_peers() const override { return "earlier shared-memory calls of this rank to finish"; }
  // The call ahead progressed at most one timeout after this one queued, so it times out first, naming the
  // peer it waits for; this wait is the net for a queue that stopped moving.
  double timeouts_allowed() const override { return 2; }
  bool await_ready() { return poll(true); }
  void await_suspend(std::coroutine_handle<> resume_point) { op_.suspend_on(this, true, resume_point); }
  void await_resume() const noexcept {}

 private:
  Operation& op_;
  const std::deque<uint64_t>& queue_;
  uint64_t sequence_;
};

// Waits until every rank's counter reaches a target.
class CounterWait : public Waitable {
 public:
  CounterWait(Operation& op, const SharedSegment& segment, const Channel& channel, Counter which)
      : op_(op), segment_(segment), channel_(channel), which_(which) {}
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
    ignored_ = nullptr;
    return {*this};
  }
  // co_await any_until(n, ignored): some rank not ignored (ignored[rank] == 0) has its counter >= n.
  Wait any_until(uint64_t target, const std::vector<char>& ignored) {
    target_ = target;
    ignored_ = &ignored;
    return {*this};
  }
  bool reached(int rank) const { return value(rank) >= target_; }

 private:
  bool waits_for(int rank) const { return !ignored_ || !(*ignored_)[static_cast<size_t>(rank)]; }
  uint64_t value(int rank) const;
  Operation& op_;
  const SharedSegment& segment_;
  const Channel& channel_;
  Counter which_;
  uint64_t target_ = 0;
  const std::vector<char>* ignored_ = nullptr;  // any_until: ranks already dealt with
};

// One meeting of a one-host call: made, it sets this rank's `which` counter to `sequence`; co_await returns
// once every rank's has reached it. Awaited as a temporary, it lives in the coroutine frame until resumed.
class Meeting {
 public:
  Meeting(Operation& op, const SharedSegment& segment, const Channel& channel, Counter which, uint64_t sequence)
      : everyone_(op, segment, channel, which) {
    segment.counter(channel.rank, which).store(sequence, std::memory_order_release);
    everyone_.until(sequence);
  }
  bool await_ready() { return CounterWait::Wait{everyone_}.await_ready(); }
  void await_suspend(std::coroutine_handle<> resume_point) { CounterWait::Wait{everyone_}.await_suspend(resume_point); }
  void await_resume() const noexcept {}

 private:
  CounterWait everyone_;
};

}  // namespace strata::comm
