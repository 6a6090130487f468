#include "core/trace_analysis.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "core/trace.h"

namespace strata::trace {
namespace {

constexpr size_t kOther = kGapCategories.size() - 1;
constexpr size_t kCompute = 4;

size_t category_index(const std::string& category) {
  static const std::map<std::string, size_t> index = {{"idle", 0},      {"comm", 1},   {"data", 2},
                                                      {"optimizer", 3}, {"kernel", 4}, {"graph", 5}};
  auto found = index.find(category);
  return found == index.end() ? kOther : found->second;
}

struct Interval {
  double begin = 0, end = 0;
  size_t category = kOther;
  bool kernel = false;
  bool step = false;
  std::string name;
  int64_t step_number = 0;
};

using Track = std::vector<Interval>;  // sorted by begin, longer first
using Tracks = std::map<std::pair<int, int>, Track>;  // by (pid, tid)

Tracks read_tracks(const nlohmann::json& trace) {
  Tracks tracks;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.value("ph", "") != "X") continue;
    Interval span;
    span.begin = event.at("ts").get<double>();
    span.end = span.begin + event.at("dur").get<double>();
    const std::string category = event.value("cat", "");
    span.category = category_index(category);
    span.kernel = category == "kernel";
    span.step = category == "step";
    span.name = event.value("name", "");
    if (span.step && event.contains("args")) span.step_number = event["args"].value("step", int64_t{0});
    tracks[{event.at("pid").get<int>(), event.at("tid").get<int>()}].push_back(std::move(span));
  }
  for (auto& [key, track] : tracks) {
    std::sort(track.begin(), track.end(), [](const Interval& a, const Interval& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
  }
  return tracks;
}

// Where the step's time went on its thread: each instant to the highest-priority category open then (into
// gaps.ms), and the compute time by the op of the outermost kernel running (into gaps.top_ops).
void assign_step_time(const Track& track, const Interval& step, StepGaps& gaps) {
  // Spans inside the step start within it (spans on one thread nest).
  auto first = std::lower_bound(track.begin(), track.end(), step.begin,
                                [](const Interval& span, double t) { return span.begin < t; });
  // time, +1/-1, category, and for outermost kernels their index in `ops` (else -1)
  std::vector<std::tuple<double, int, size_t, int>> boundaries;
  std::vector<const std::string*> ops;
  double outer_kernel_end = -1;
  for (auto it = first; it != track.end() && it->begin < step.end; ++it) {
    if (&*it == &step) continue;
    const double begin = std::max(it->begin, step.begin), end = std::min(it->end, step.end);
    if (end <= begin) continue;
    int op = -1;
    if (it->kernel && it->begin >= outer_kernel_end) {  // outermost kernels: nested ones are their parts
      op = static_cast<int>(ops.size());
      ops.push_back(&it->name);
      outer_kernel_end = it->end;
    }
    boundaries.emplace_back(begin, +1, it->category, op);
    boundaries.emplace_back(end, -1, it->category, op);
  }
  std::sort(boundaries.begin(), boundaries.end());  // at one instant, ends before starts
  std::array<int, kGapCategories.size()> open{};
  std::array<double, kGapCategories.size()> us{};
  std::map<std::string, double> op_us;  // compute time by the outermost kernel's op type
  int current_op = -1;
  double at = step.begin;
  auto assign = [&](double until) {
    if (until <= at) return;
    const auto highest = std::find_if(open.begin(), open.end(), [](int spans) { return spans > 0; });
    const size_t top = highest == open.end() ? kOther : static_cast<size_t>(highest - open.begin());
    us[top] += until - at;
    if (top == kCompute && current_op >= 0) op_us[*ops[static_cast<size_t>(current_op)]] += until - at;
    at = until;
  };
  for (const auto& [time, delta, category, op] : boundaries) {
    assign(time);
    open[category] += delta;
    if (op >= 0) current_op = delta > 0 ? op : -1;
  }
  assign(step.end);
  for (size_t c = 0; c < us.size(); ++c) gaps.ms[c] = us[c] / 1e3;
  for (const auto& [name, time] : op_us) gaps.top_ops.emplace_back(name, time / 1e3);
  std::sort(gaps.top_ops.begin(), gaps.top_ops.end(),
            [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
}

// Collectives in flight on the lanes of rank `pid` during the step: the union of their intervals, ms.
double comm_in_flight_ms(const Tracks& tracks, int pid, const Interval& step) {
  std::vector<std::pair<double, double>> flights;
  for (auto lane = tracks.lower_bound({pid, kLaneTid0}); lane != tracks.end() && lane->first.first == pid; ++lane) {
    for (const Interval& span : lane->second) {
      const double begin = std::max(span.begin, step.begin), end = std::min(span.end, step.end);
      if (end > begin) flights.emplace_back(begin, end);
    }
  }
  std::sort(flights.begin(), flights.end());
  double covered_until = step.begin, flight_us = 0;
  for (const auto& [begin, end] : flights) {
    if (end <= covered_until) continue;
    flight_us += end - std::max(begin, covered_until);
    covered_until = end;
  }
  return flight_us / 1e3;
}

}  // namespace

std::vector<StepGaps> analyse_steps(const nlohmann::json& trace) {
  const Tracks tracks = read_tracks(trace);
  std::vector<StepGaps> result;
  for (const auto& [key, track] : tracks) {
    const auto [pid, tid] = key;
    if (tid >= kLaneTid0) continue;
    for (const Interval& step : track) {
      if (!step.step) continue;
      StepGaps gaps;
      gaps.pid = pid;
      gaps.tid = tid;
      gaps.step = step.step_number;
      gaps.start_us = step.begin;
      gaps.step_ms = (step.end - step.begin) / 1e3;
      assign_step_time(track, step, gaps);
      gaps.comm_in_flight_ms = comm_in_flight_ms(tracks, pid, step);
      result.push_back(std::move(gaps));
    }
  }
  std::sort(result.begin(), result.end(), [](const StepGaps& a, const StepGaps& b) {
    return a.pid != b.pid ? a.pid < b.pid : a.start_us < b.start_us;
  });
  return result;
}

namespace {

// The brief's order for display: compute first, then what is not compute.
constexpr std::array<size_t, kGapCategories.size()> kDisplayOrder = {4, 1, 0, 5, 2, 3, 6};
constexpr std::array<const char*, kGapCategories.size()> kDisplayNames = {
    "idle", "exposed comm", "data", "optimizer", "compute", "host overhead", "other"};

}  // namespace

std::string format_gap_analysis(const std::vector<StepGaps>& steps, size_t top_ops) {
  if (steps.empty()) return "gap analysis: no step was traced\n";
  std::string out =
      "gap analysis: each step's wall time on its rank's main thread, every instant counted once, by priority "
      "idle > exposed comm > data > optimizer > compute > host overhead > other (ms and share of the step)\n";
  out += fmt::format("{:>5} {:>4} {:>9}", "step", "rank", "step ms");
  for (size_t c : kDisplayOrder) out += fmt::format(" | {:>14}", kDisplayNames[c]);
  out += fmt::format(" | {:>9}\n", "in flight");
  std::vector<const StepGaps*> rows;
  for (const StepGaps& gaps : steps) rows.push_back(&gaps);
  std::stable_sort(rows.begin(), rows.end(), [](const StepGaps* a, const StepGaps* b) {
    return a->step != b->step ? a->step < b->step : a->pid < b->pid;
  });
  for (const StepGaps* row : rows) {
    const StepGaps& gaps = *row;
    out += fmt::format("{:>5} {:>4} {:>9.2f}", gaps.step, gaps.pid, gaps.step_ms);
    for (size_t c : kDisplayOrder) {
      out += fmt::format(" | {:>8.2f} {:>4.1f}%", gaps.ms[c], gaps.step_ms > 0 ? 100 * gaps.ms[c] / gaps.step_ms : 0.0);
    }
    out += fmt::format(" | {:>9.2f}\n", gaps.comm_in_flight_ms);
  }
  out += "(in flight: collectives running on the rank while it computed or waited, not part of the sum)\n";
  // Top ops of the first rank traced, over all its steps.
  const int pid = steps.front().pid;
  std::map<std::string, double> op_ms;
  double compute_ms = 0;
  int64_t count = 0;
  for (const StepGaps& gaps : steps) {
    if (gaps.pid != pid) continue;
    ++count;
    for (const auto& [name, ms] : gaps.top_ops) {
      op_ms[name] += ms;
      compute_ms += ms;
    }
  }
  std::vector<std::pair<std::string, double>> sorted(op_ms.begin(), op_ms.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  out += fmt::format("top ops by compute time (rank {}, mean ms per step over {} step(s), share of compute):\n", pid,
                     count);
  for (size_t i = 0; i < sorted.size() && i < top_ops; ++i) {
    out += fmt::format("  {:<24} {:>9.2f} {:>5.1f}%\n", sorted[i].first, sorted[i].second / static_cast<double>(count),
                       compute_ms > 0 ? 100 * sorted[i].second / compute_ms : 0.0);
  }
  return out;
}

nlohmann::json gaps_to_json(const std::vector<StepGaps>& steps) {
  nlohmann::json list = nlohmann::json::array();
  for (const StepGaps& gaps : steps) {
    nlohmann::json ms = nlohmann::json::object(), shares = nlohmann::json::object();
    for (size_t c = 0; c < kGapCategories.size(); ++c) {
      ms[kGapCategories[c]] = gaps.ms[c];
      shares[kGapCategories[c]] = gaps.step_ms > 0 ? gaps.ms[c] / gaps.step_ms : 0.0;
    }
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& [name, time] : gaps.top_ops) ops.push_back({{"op", name}, {"ms", time}});
    list.push_back({{"step", gaps.step},
                    {"rank", gaps.pid},
                    {"tid", gaps.tid},
                    {"step_ms", gaps.step_ms},
                    {"ms", ms},
                    {"share", shares},
                    {"comm_in_flight_ms", gaps.comm_in_flight_ms},
                    {"ops", ops}});
  }
  return {{"priority", kGapCategories}, {"steps", list}};
}

}  // namespace strata::trace
