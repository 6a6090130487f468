#include "comm/engine.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "comm/call_phases.h"
#include "core/error.h"

namespace strata::comm {
namespace {

std::vector<std::string>& hostnames() {
  static std::vector<std::string> names;
  return names;
}

int world_rank_of_self() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Fruitless polls before a waiting rank yields its core: when ranks outnumber
// cores a spinning rank starves the peer it waits for; otherwise only after a
// long wait, to leave room for whatever else runs on the host. A wait longer
// still (a peer computing, or gone until the timeout) sleeps, with intervals
// that grow to a millisecond: a yielding loop alone still burns a whole core.
constexpr int kSpinsBeforeYieldOversubscribed = 4;
constexpr auto kSpinTimeBeforeYield = std::chrono::milliseconds(1);
constexpr auto kIdleTimeBeforeSleep = std::chrono::milliseconds(5);
constexpr auto kShortestSleep = std::chrono::microseconds(20);
constexpr auto kLongestSleep = std::chrono::milliseconds(1);

// One fruitless spin of a wait loop: the pause hint keeps the spinning core's loads of the peers' counters from
// crowding the core that is about to write them. On the 2-core EPYC VM a 2-rank all_to_all of 64 KiB runs in one of
// two modes for a whole launch, 6-11 us a call or 15-24 us; in five alternating tests with and without the hint
// (51 launches each) the fast mode came 32 times with it and 19 times without.
inline void relax_core() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

void set_world_hostnames(std::vector<std::string> names) { hostnames() = std::move(names); }

std::string world_hostname(int world_rank) {
  const auto& names = hostnames();
  if (world_rank < 0 || static_cast<size_t>(world_rank) >= names.size()) return "?";
  return names[static_cast<size_t>(world_rank)];
}

std::string peer_label(const Channel& channel, int rank) {
  int world = channel.world_rank[static_cast<size_t>(rank)];
  return fmt::format("peer rank {} (world rank {} on {})", channel.group_rank[static_cast<size_t>(rank)], world,
                     world_hostname(world));
}

std::string OpLabel::describe() const {
  std::string text = kind;
  if (bytes == 0 && algorithm == Algorithm::Auto && peer < 0) return text;
  text += " (";
  if (algorithm != Algorithm::Auto) text += fmt::format("{}, ", algorithm_name(algorithm));
  text += fmt::format("{} bytes of {}", bytes, dtype_name(dtype));
  if (reduce >= 0) text += fmt::format(", {}", reduce_op_name(static_cast<ReduceOp>(reduce)));
  if (root >= 0) text += fmt::format(", root {}", root);
  if (peer >= 0) text += fmt::format(" {} rank {}", std::string_view(kind) == "send" ? "to" : "from", peer);
  return text + ")";
}

void Operation::suspend_on(Waitable* waitable, bool all, std::coroutine_handle<> resume_point) {
  waiting_ = waitable;
  wait_all_ = all;
  resume_point_ = resume_point;
}

void Operation::abort_with(const std::string& problem) const {
  int world = world_rank_of_self();
  std::string message =
      fmt::format("strata comm error on world rank {} ({}): {} on group '{}' (rank {} of {}, call #{}): {}\n", world,
                  world_hostname(world), label_.describe(), label_.group ? *label_.group : "?", label_.group_rank,
                  label_.group_size, label_.sequence, problem);
  std::fputs(message.c_str(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 70);
  std::abort();
}

double Engine::cores_for(int group_ranks) const {
  const double share = static_cast<double>(host_cores_) * group_ranks / std::max(host_ranks_, 1);
  return std::clamp(share, 1.0, static_cast<double>(group_ranks));
}

Engine& Engine::instance() {
  static Engine engine;
  return engine;
}

void Engine::launch(const std::shared_ptr<Operation>& op) {
  CallPhases::stamp(CallPoint::Launching);
  now_ = Operation::Clock::now();
  op->last_progress_ = now_;
  op->last_poll_ = now_;
  if (trace::Tracer* tracer = trace::active()) [[unlikely]] {
    op->tracer_ = tracer;
    op->trace_start_us_ = trace::now_us();
    op->trace_lane_ = tracer->acquire_lane();
  }
  op->body_.start();
  CallPhases::stamp(CallPoint::Launched);
  if (op->body_.done()) {
    mark_finished(*op);
    return;
  }
  active_.push_back(op);
}

namespace {

// A span's arguments: what the call moves, over which group, how.
std::string trace_args(const OpLabel& label) {
  std::string args = fmt::format(R"({{"group":"{}","group_rank":{},"group_size":{},"seq":{},"bytes":{})",
                                 label.group ? *label.group : "?", label.group_rank, label.group_size,
                                 label.sequence, label.bytes);
  if (label.algorithm != Algorithm::Auto) args += fmt::format(R"(,"algorithm":"{}")", algorithm_name(label.algorithm));
  if (label.bytes > 0) args += fmt::format(R"(,"dtype":"{}")", dtype_name(label.dtype));
  if (label.reduce >= 0) args += fmt::format(R"(,"reduce":"{}")", reduce_op_name(static_cast<ReduceOp>(label.reduce)));
  if (label.root >= 0) args += fmt::format(R"(,"root":{})", label.root);
  if (label.peer >= 0) args += fmt::format(R"(,"peer":{})", label.peer);
  return args + "}";
}

// Blocking on peers (point to point, barriers) is idle time; on a collective, exposed communication.
const char* wait_category(const OpLabel& label) {
  const std::string_view kind = label.kind;
  return kind == "send" || kind == "recv" || kind == "barrier" ? "idle" : "comm";
}

}  // namespace

void Engine::mark_finished(Operation& op) {
  op.finished_ = true;
  CallPhases::stamp(CallPoint::Finished);
  if (!op.tracer_) [[likely]] return;
  trace::Tracer* tracer = std::exchange(op.tracer_, nullptr);
  if (trace::installed() != tracer) return;  // the tracer is gone
  tracer->add(op.label_.kind, "comm_flight", op.trace_start_us_, trace::now_us() - op.trace_start_us_,
              trace::kLaneTid0 + op.trace_lane_, trace_args(op.label_));
  tracer->release_lane(op.trace_lane_);
}

void Engine::finish(Operation& op) {
  if (std::exception_ptr error = op.body_.error()) std::rethrow_exception(error);
}

bool Engine::advance(Operation& op, Operation::Clock::time_point now) {
  // A rank that stopped polling for a while (computing) gives its peers a fresh
  // window instead of blaming them for its own absence.
  if (now - op.last_poll_ > std::chrono::duration<double>(op.timeout_s_ / 2)) op.last_progress_ = now;
  op.last_poll_ = now;
  if (!op.waiting_->poll(op.wait_all_)) {
    const double allowed = op.waiting_->timeouts_allowed();
    if (now - op.last_progress_ > std::chrono::duration<double>(op.timeout_s_ * allowed)) {
      op.abort_with(fmt::format("no progress for {:.1f} s ({}); waiting for {}", op.timeout_s_ * allowed,
                                allowed == 1 ? "the timeout" : fmt::format("{:g} times the timeout", allowed),
                                op.waiting_->pending_peers()));
    }
    return false;
  }
  op.waiting_ = nullptr;
  op.last_progress_ = now;
  std::coroutine_handle<> resume_point = std::exchange(op.resume_point_, {});
  resume_point.resume();
  if (op.body_.done()) mark_finished(op);
  return true;
}

bool Engine::progress_all() {
  if (polls_++ % 16 == 0) now_ = Operation::Clock::now();
  bool progressed = false;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (!active_[i]->finished_) progressed = advance(*active_[i], now_) || progressed;
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto& op) { return op->finished_; }),
                active_.end());
  return progressed;
}

bool Engine::test(Operation& op) {
  // test() may come seldom: the clock must be current for the timeout.
  now_ = Operation::Clock::now();
  polls_ = 1;
  if (!op.finished_) progress_all();
  if (op.finished_) finish(op);
  return op.finished_;
}

void Engine::wait(Operation& op) {
  trace::Span span(op.label_.kind, wait_category(op.label_));
  if (span) [[unlikely]] {
    span.set_name(std::string(op.label_.kind) + " wait");
    span.set_args(trace_args(op.label_));
  }
  int idle_polls = 0;
  auto idle_since = now_;
  std::chrono::microseconds sleep = kShortestSleep;
  while (!op.finished_) {
    if (progress_all()) {
      idle_polls = 0;
      sleep = kShortestSleep;
      continue;
    }
    if (idle_polls++ == 0) idle_since = now_;
    if (now_ - idle_since > kIdleTimeBeforeSleep) {
      std::this_thread::sleep_for(sleep);
      sleep = std::min<std::chrono::microseconds>(sleep * 2, kLongestSleep);
      now_ = Operation::Clock::now();  // the timeout counts the time asleep
      continue;
    }
    bool yield = oversubscribed() ? idle_polls > kSpinsBeforeYieldOversubscribed
                                 : now_ - idle_since > kSpinTimeBeforeYield;
    if (yield) {
      sched_yield();
    } else {
      relax_core();
    }
  }
  CallPhases::stamp(CallPoint::Returned);
  finish(op);
}

RequestSet::RequestSet(Operation& op, const Channel& channel, int tag, size_t slots)
    : op_(op), channel_(channel), tag_(tag), size_(slots), requests_(slots, MPI_REQUEST_NULL), slots_(slots, Slot{}),
      indices_(slots, 0), statuses_(slots, MPI_Status{}) {}

void RequestSet::send(size_t slot, const void* data, size_t bytes, int peer) {
  STRATA_CHECK(idle(slot) && bytes <= kMaxMessageBytes, "send slot {} busy or {} bytes too large", slot, bytes);
  slots_[slot] = {peer, true, bytes};
  int code = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag_, channel_.comm, &requests_[slot]);
  if (code != MPI_SUCCESS) op_.abort_with(fmt::format("cannot send to {}: {}", peer_name(slot), mpi_error_text(code)));
}

void RequestSet::recv(size_t slot, void* data, size_t bytes, int peer) {
  STRATA_CHECK(idle(slot) && bytes <= kMaxMessageBytes, "recv slot {} busy or {} bytes too large", slot, bytes);
  slots_[slot] = {peer, false, bytes};
  int code = MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag_, channel_.comm, &requests_[slot]);
  if (code != MPI_SUCCESS) {
    op_.abort_with(fmt::format("cannot receive from {}: {}", peer_name(slot), mpi_error_text(code)));
  }
}

void RequestSet::adopt(size_t slot, MPI_Request request) {
  STRATA_CHECK(idle(slot), "slot {} busy", slot);
  slots_[slot] = Slot{};
  requests_[slot] = request;
}

bool RequestSet::poll(bool all) {
  int completed = 0;
  int code = MPI_Testsome(static_cast<int>(size_), requests_.data(), &completed, indices_.data(), statuses_.data());
  if (completed == MPI_UNDEFINED) return true;  // nothing pending
  for (int i = 0; i < completed; ++i) {
    size_t slot = static_cast<size_t>(indices_[static_cast<size_t>(i)]);
    const MPI_Status& status = statuses_[static_cast<size_t>(i)];
    if (code == MPI_ERR_IN_STATUS && status.MPI_ERROR != MPI_SUCCESS) {
      op_.abort_with(fmt::format("{} {} failed: {}", slots_[slot].sending ? "send to" : "receive from",
                                 peer_name(slot), mpi_error_text(status.MPI_ERROR)));
    }
    if (!slots_[slot].sending && slots_[slot].peer >= 0) {
      int received = 0;
      MPI_Get_count(&status, MPI_BYTE, &received);
      if (static_cast<size_t>(received) != slots_[slot].expected) {
        op_.abort_with(fmt::format("received {} bytes from {} where {} were expected: the ranks disagree about "
                                   "this call (STRATA_COMM_CHECK=before names the difference)",
                                   received, peer_name(slot), slots_[slot].expected));
      }
    }
  }
  if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) {
    op_.abort_with(fmt::format("MPI_Testsome failed: {} (waiting for {})", mpi_error_text(code), pending_peers()));
  }
  if (!all) return completed > 0;
  return !busy();
}

bool RequestSet::busy() const {
  for (size_t slot = 0; slot < size_; ++slot) {
    if (!idle(slot)) return true;
  }
  return false;
}

std::string RequestSet::peer_name(size_t slot) const {
  int peer = slots_[slot].peer;
  if (peer < 0) return "the other ranks inside the MPI library's collective";
  return peer_label(channel_, peer);
}

std::string RequestSet::pending_peers() const {
  std::string text;
  for (size_t slot = 0; slot < size_; ++slot) {
    if (idle(slot)) continue;
    std::string item = fmt::format("{} ({})", peer_name(slot), slots_[slot].sending ? "to receive our message"
                                                                                    : "to send its message");
    if (text.find(item) != std::string::npos) continue;
    text += (text.empty() ? "" : ", ") + item;
  }
  return text.empty() ? "nothing (internal error)" : text;
}

}  // namespace strata::comm
