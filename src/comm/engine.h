#pragma once
// The runtime under every call: an Operation is one collective (or send,
// recv, barrier) in flight, its algorithm a coroutine that suspends on a
// Waitable: MPI requests, or counters in shared memory. The Engine polls them
// (MPI_Testsome, never a blocking MPI call), resumes coroutines whose wait is
// over, and enforces the timeout: an operation that sees no progress for
// `timeout_s` while its rank keeps polling reports the collective, the group
// and the peers it waits for, then brings the job down with MPI_Abort (a pause
// in polling longer than half the timeout restarts the count). Progress happens
// only inside Handle::test()/wait() (no progress thread), and each of those
// calls drives every operation in flight, so waiting on handles in any order
// cannot deadlock.
#include <mpi.h>

#include <array>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "comm/task.h"
#include "core/dtype.h"
#include "core/trace.h"

namespace strata::comm {

// One MPI communicator an algorithm talks over, with the names of its ranks.
struct Channel {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::vector<int> group_rank;  // channel rank -> rank in the group the user called
  std::vector<int> world_rank;  // channel rank -> rank in MPI_COMM_WORLD
};

// What an operation is, for error messages and the call check. Plain
// fields, formatted only when something goes wrong.
struct OpLabel {
  const char* kind = "";  // "all_reduce", "send", "barrier", ...
  Algorithm algorithm = Algorithm::Auto;  // Auto: nothing to name
  size_t bytes = 0;
  DType dtype = DType::F32;
  int reduce = -1;  // a ReduceOp, or -1
  int root = -1;    // broadcast root, or -1
  int peer = -1;    // send/recv peer, or -1
  const std::string* group = nullptr;  // owned by the group, which the operation keeps alive
  int group_rank = 0;
  int group_size = 1;
  uint64_t sequence = 0;

  std::string describe() const;  // "all_reduce (ring, 4096 bytes of f32, sum)"
};

// MPI's text for an error code.
std::string mpi_error_text(int code);

// Host names by world rank, filled when the world communicator is created.
void set_world_hostnames(std::vector<std::string> hostnames);
std::string world_hostname(int world_rank);

// "peer rank 1 (world rank 3 on host)": channel rank `rank`, for error messages.
std::string peer_label(const Channel& channel, int rank);

// Something an algorithm waits on: MPI requests, or counters in shared memory.
class Waitable {
 public:
  virtual ~Waitable() = default;
  // True when satisfied: all of it, or (any) at least one part or nothing pending.
  virtual bool poll(bool all) = 0;
  // Who is missing, for the timeout message.
  virtual std::string pending_peers() const = 0;
  // The timeout's multiple this wait is given before its call is aborted.
  virtual double timeouts_allowed() const { return 1; }
};

class Operation {
 public:
  using Clock = std::chrono::steady_clock;
  Operation(OpLabel label, double timeout_s) : label_(std::move(label)), timeout_s_(timeout_s) {}

  const OpLabel& label() const { return label_; }
  double timeout_s() const { return timeout_s_; }
  bool finished() const { return finished_; }
  void set_body(Task body) { body_ = std::move(body); }
  void keep_alive(std::shared_ptr<const void> owner) { owner_ = std::move(owner); }

  // The innermost coroutine waits on `waitable`.
  void suspend_on(Waitable* waitable, bool all, std::coroutine_handle<> resume_point);

  // Reports a failure of this operation and aborts the job.
  [[noreturn]] void abort_with(const std::string& problem) const;

 private:
  friend class Engine;
  OpLabel label_;
  double timeout_s_;
  Task body_;
  std::shared_ptr<const void> owner_;
  Waitable* waiting_ = nullptr;
  bool wait_all_ = false;
  std::coroutine_handle<> resume_point_;
  Clock::time_point last_progress_{};
  Clock::time_point last_poll_{};
  bool finished_ = false;
  // Tracing (core/trace.h): the tracer recording when the operation started, its start and lane.
  trace::Tracer* tracer_ = nullptr;
  double trace_start_us_ = 0;
  int trace_lane_ = -1;
};

// The process's operations in flight. Not thread-safe: use from one thread.
class Engine {
 public:
  static Engine& instance();
  // Starts `op` (it runs until its first wait) and tracks it until it finishes.
  void launch(const std::shared_ptr<Operation>& op);
  // Drives everything once; true when `op` has finished (rethrows its error).
  bool test(Operation& op);
  // Drives everything until `op` finishes (rethrows its error).
  void wait(Operation& op);
  // This process's host: how many ranks of the job share it, and its cores.
  // With more ranks than cores, a waiting rank yields its core at once (its
  // peers need it); otherwise it spins, as MPI does, and yields only after a
  // millisecond without progress.
  void set_host(int ranks, int cores) {
    host_ranks_ = ranks;
    host_cores_ = cores;
  }
  // The cores `group_ranks` of the host's ranks get when all run at once:
  // their share of the host's cores, at most one each.
  double cores_for(int group_ranks) const;

 private:
  bool advance(Operation& op, Operation::Clock::time_point now);
  static void mark_finished(Operation& op);  // and, when traced, its span in flight
  bool progress_all();  // true when some operation moved
  static void finish(Operation& op);
  std::vector<std::shared_ptr<Operation>> active_;
  bool oversubscribed() const { return host_ranks_ > host_cores_; }
  // Until the world is joined the host is unknown: count it oversubscribed (yield early).
  int host_ranks_ = 1;
  int host_cores_ = 0;
  // Reading the clock costs as much as a poll: it is refreshed every few polls.
  Operation::Clock::time_point now_{};
  unsigned polls_ = 0;
};

// A fixed-size array kept inline when small: a RequestSet is built for every
// step of an algorithm, so small ones must not touch the heap.
template <typename T, size_t Inline>
class SlotArray {
 public:
  SlotArray(size_t size, const T& value) : heap_(size > Inline ? std::make_unique<T[]>(size) : nullptr) {
    data_ = heap_ ? heap_.get() : inline_.data();
    for (size_t i = 0; i < size; ++i) data_[i] = value;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  std::array<T, Inline> inline_{};
  std::unique_ptr<T[]> heap_;
  T* data_;
};

// Slots of MPI requests an algorithm waits on; the peers behind each slot name
// who is missing when a wait times out. Received sizes are checked: a
// different size means the ranks disagree about the call.
class RequestSet : public Waitable {
 public:
  RequestSet(Operation& op, const Channel& channel, int tag, size_t slots);
  RequestSet(const RequestSet&) = delete;
  RequestSet& operator=(const RequestSet&) = delete;

  void send(size_t slot, const void* data, size_t bytes, int peer);
  void recv(size_t slot, void* data, size_t bytes, int peer);
  // A request of a non-blocking MPI collective (no single peer to blame).
  void adopt(size_t slot, MPI_Request request);
  bool idle(size_t slot) const { return requests_[slot] == MPI_REQUEST_NULL; }
  bool busy() const;  // some request still pending

  // Tests the requests; true when all (or, for any, at least one or none
  // pending) completed. Failures abort.
  bool poll(bool all) override;
  std::string pending_peers() const override;

  struct Wait {
    RequestSet& set;
    bool all;
    bool await_ready() { return set.poll(all); }
    void await_suspend(std::coroutine_handle<> resume_point) { set.op_.suspend_on(&set, all, resume_point); }
    void await_resume() const noexcept {}
  };
  Wait all() { return {*this, true}; }
  Wait any() { return {*this, false}; }

 private:
  std::string peer_name(size_t slot) const;

  struct Slot {
    int peer = -1;  // channel rank, -1 for an adopted collective
    bool sending = false;
    size_t expected = 0;  // bytes a receive must bring
  };
  static constexpr size_t kInline = 8;

  Operation& op_;
  const Channel& channel_;
  int tag_;
  size_t size_;
  SlotArray<MPI_Request, kInline> requests_;
  SlotArray<Slot, kInline> slots_;
  SlotArray<int, kInline> indices_;
  SlotArray<MPI_Status, kInline> statuses_;
};

// Largest single message; bigger transfers are split.
inline constexpr size_t kMaxMessageBytes = size_t{1} << 30;

}  // namespace strata::comm
