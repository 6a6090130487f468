#include "core/trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"

namespace strata::trace {
namespace {

std::atomic<uint64_t> generations{0};

// The calling thread's track under the tracer of `generation`.
struct ThreadTrack {
  uint64_t generation = 0;
  int tid = 0;
};
thread_local ThreadTrack this_thread_track;

}  // namespace

Tracer::Tracer(int pid) : pid_(pid), generation_(++generations) {}

Tracer::~Tracer() {
  Tracer* self = this;
  detail::recording.compare_exchange_strong(self, nullptr);
  self = this;
  detail::installed.compare_exchange_strong(self, nullptr);
}

void Tracer::install() {
  this_thread_track = {generation_, kMainTid};
  detail::installed.store(this, std::memory_order_release);
}

void Tracer::set_recording(bool on) {
  STRATA_CHECK(installed() == this, "a tracer records only while installed");
  detail::recording.store(on ? this : nullptr, std::memory_order_release);
}

int Tracer::thread_id() {
  ThreadTrack& track = this_thread_track;
  if (track.generation != generation_) {
    std::lock_guard lock(mutex_);
    track = {generation_, next_tid_++};
  }
  return track.tid;
}

void Tracer::add(std::string name, const char* category, double ts_us, double dur_us, int tid, std::string args) {
  std::lock_guard lock(mutex_);
  events_.push_back({std::move(name), category, ts_us, std::max(dur_us, 0.0), tid, std::move(args)});
}

int Tracer::acquire_lane() {
  std::lock_guard lock(mutex_);
  auto free = std::find(lanes_busy_.begin(), lanes_busy_.end(), false);
  if (free == lanes_busy_.end()) free = lanes_busy_.insert(lanes_busy_.end(), false);
  *free = true;
  const int lane = static_cast<int>(free - lanes_busy_.begin());
  lanes_used_ = std::max(lanes_used_, lane + 1);
  return lane;
}

void Tracer::release_lane(int lane) {
  std::lock_guard lock(mutex_);
  if (lane >= 0 && static_cast<size_t>(lane) < lanes_busy_.size()) lanes_busy_[static_cast<size_t>(lane)] = false;
}

size_t Tracer::size() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

std::vector<Event> Tracer::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

nlohmann::json Tracer::to_json(const nlohmann::json& other) const {
  std::lock_guard lock(mutex_);
  nlohmann::json events = nlohmann::json::array();
  auto metadata = [&](const char* name, int tid, nlohmann::json args) {
    events.push_back({{"name", name}, {"ph", "M"}, {"pid", pid_}, {"tid", tid}, {"args", std::move(args)}});
  };
  metadata("process_name", kMainTid, {{"name", "rank " + std::to_string(pid_)}});
  metadata("process_sort_index", kMainTid, {{"sort_index", pid_}});
  std::set<int> tids{kMainTid};
  for (const Event& event : events_) tids.insert(event.tid);
  for (int tid : tids) {
    std::string name = tid == kMainTid  ? std::string("main")
                       : tid >= kLaneTid0 ? "comm in flight " + std::to_string(tid - kLaneTid0)
                                          : "thread " + std::to_string(tid);
    metadata("thread_name", tid, {{"name", name}});
    metadata("thread_sort_index", tid, {{"sort_index", tid}});
  }
  for (const Event& event : events_) {
    nlohmann::json span = {{"name", event.name}, {"cat", event.category}, {"ph", "X"},     {"ts", event.ts_us},
                           {"dur", event.dur_us}, {"pid", pid_},          {"tid", event.tid}};
    if (!event.args.empty()) span["args"] = nlohmann::json::parse(event.args);
    events.push_back(std::move(span));
  }
  nlohmann::json data = other.is_object() ? other : nlohmann::json::object();
  data["comm_lanes"] = lanes_used_;
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(data)}};
}

void Span::begin(std::string_view name, const char* category) {
  name_.assign(name);
  category_ = category;
  start_us_ = now_us();
}

void Span::end() {
  const double end_us = now_us();
  tracer_->add(std::move(name_), category_, start_us_, end_us - start_us_, tracer_->thread_id(), std::move(args_));
}

nlohmann::json merge_traces(const std::vector<nlohmann::json>& parts) {
  nlohmann::json events = nlohmann::json::array();
  std::string first_host;
  double first_sync = 0;
  std::vector<double> shifts;
  for (size_t p = 0; p < parts.size(); ++p) {
    const nlohmann::json other = parts[p].value("otherData", nlohmann::json::object());
    const std::string host = other.value("host", std::string());
    const double sync = other.value("clock_sync_us", 0.0);
    if (p == 0) {
      first_host = host;
      first_sync = sync;
    }
    shifts.push_back(p > 0 && host != first_host && sync != 0 && first_sync != 0 ? first_sync - sync : 0.0);
  }
  double earliest = std::numeric_limits<double>::infinity();
  for (size_t p = 0; p < parts.size(); ++p) {
    for (const nlohmann::json& event : parts[p].at("traceEvents")) {
      if (event.contains("ts")) earliest = std::min(earliest, event["ts"].get<double>() + shifts[p]);
    }
  }
  if (!std::isfinite(earliest)) earliest = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    for (nlohmann::json event : parts[p].at("traceEvents")) {
      // Nanosecond resolution is plenty (and keeps the file short).
      auto round_ns = [](double us) { return std::round(us * 1e3) / 1e3; };
      if (event.contains("ts")) event["ts"] = round_ns(event["ts"].get<double>() + shifts[p] - earliest);
      if (event.contains("dur")) event["dur"] = round_ns(event["dur"].get<double>());
      events.push_back(std::move(event));
    }
  }
  // otherData stays flat (string and number values), as the format's examples have it.
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"producer", "strata train --trace"}, {"parts", parts.size()}, {"steady_clock_origin_us", earliest}}}};
}

std::string sibling_path(const std::string& trace_path, std::string_view suffix) {
  constexpr std::string_view json = ".json";
  if (trace_path.size() > json.size() && trace_path.ends_with(json)) {
    return trace_path.substr(0, trace_path.size() - json.size()) + std::string(suffix);
  }
  return trace_path + std::string(suffix);
}

}  // namespace strata::trace
