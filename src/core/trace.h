#pragma once
// The profiler timeline: spans recorded as Chrome trace-event JSON (complete
// events, "ph": "X", microseconds), which Perfetto and chrome://tracing open.
// One process-wide tracer at a time; while it records, `Span`s and direct
// `add` calls append events (thread-safe). Off, a span costs one relaxed load
// and a null check: the layers instrument their hot paths unconditionally.
//
// Tracks: pid = the rank; tid 1 = the thread that installed the tracer
// ("main"), other threads 2, 3, ... in order of their first event; tids from
// kLaneTid0 up are lanes for operations in flight (collectives started and
// finished later), one lane per overlapping operation so that no two events of
// a track partly overlap.
//
// Timestamps are the steady clock's microseconds; `merge_traces` rebases every
// part to the earliest event (ranks on one host share the clock; parts from
// other hosts are shifted by the clock difference measured at a barrier).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::trace {

inline constexpr int kMainTid = 1;
inline constexpr int kLaneTid0 = 1000;

struct Event {
  std::string name;
  const char* category = "";  // a string literal
  double ts_us = 0;
  double dur_us = 0;
  int tid = kMainTid;
  std::string args;  // a JSON object's text, or empty
};

class Tracer;

namespace detail {
inline std::atomic<Tracer*> recording{nullptr};
inline std::atomic<Tracer*> installed{nullptr};
}  // namespace detail

// The tracer while it records, else null: the one check on every hot path.
inline Tracer* active() { return detail::recording.load(std::memory_order_relaxed); }
// The installed tracer, recording or not (operations finishing later check they still may add).
inline Tracer* installed() { return detail::installed.load(std::memory_order_acquire); }

inline double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Tracer {
 public:
  // `pid` names the process's track ("rank <pid>").
  explicit Tracer(int pid);
  ~Tracer();  // uninstalls
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Makes this the process's tracer; the calling thread becomes track kMainTid.
  void install();
  void set_recording(bool on);
  bool recording() const { return active() == this; }
  int pid() const { return pid_; }

  // The calling thread's track.
  int thread_id();
  void add(std::string name, const char* category, double ts_us, double dur_us, int tid, std::string args = {});
  // A lane for an operation in flight (its track is kLaneTid0 + lane), and its release.
  int acquire_lane();
  void release_lane(int lane);

  size_t size() const;
  std::vector<Event> events() const;
  // {"traceEvents": [...]}: metadata events naming the process and every thread, then the spans
  // (absolute timestamps), and "otherData" with `other` merged in.
  nlohmann::json to_json(const nlohmann::json& other = nlohmann::json::object()) const;

 private:
  mutable std::mutex mutex_;
  int pid_;
  uint64_t generation_;  // tells a thread's cached track apart from an earlier tracer's
  int next_tid_ = kMainTid + 1;
  std::vector<Event> events_;
  std::vector<bool> lanes_busy_;
  int lanes_used_ = 0;
};

// A span on the calling thread's track from construction to destruction.
class Span {
 public:
  Span(std::string_view name, const char* category) : tracer_(active()) {
    if (tracer_) [[unlikely]] begin(name, category);
  }
  ~Span() {
    if (tracer_) [[unlikely]] end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  explicit operator bool() const { return tracer_ != nullptr; }
  Tracer* tracer() const { return tracer_; }
  // Only while on (check first: building the text is the caller's cost).
  void set_name(std::string name) { name_ = std::move(name); }
  void set_args(std::string json_object) { args_ = std::move(json_object); }
  void set_args(const nlohmann::json& object) { args_ = object.dump(); }

 private:
  void begin(std::string_view name, const char* category);
  void end();
  Tracer* tracer_;
  std::string name_;
  const char* category_ = "";
  double start_us_ = 0;
  std::string args_;
};

// Every part's events in one trace, timestamps rebased to the earliest span. A part whose
// otherData "host" differs from the first part's is shifted by the difference of their
// otherData "clock_sync_us" (taken right after a common barrier), so hosts line up.
nlohmann::json merge_traces(const std::vector<nlohmann::json>& parts);

// "FILE.json" -> "FILE<suffix>" (e.g. ".rank1.json", ".gaps.json"); a name without ".json" gets the suffix appended.
std::string sibling_path(const std::string& trace_path, std::string_view suffix);

}  // namespace strata::trace
