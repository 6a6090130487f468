#pragma once
// Checks every test of `--trace` output makes: each event well formed as the
// Chrome trace-event format wants it, and spans of one track properly nested.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::testing {

// Every event has name, ph, pid and tid; complete events ("X") also cat, ts and dur >= 0;
// metadata events ("M") name their process or thread.
inline void expect_well_formed_trace(const nlohmann::json& trace) {
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    ASSERT_TRUE(event.contains("name") && event["name"].is_string()) << event.dump();
    ASSERT_TRUE(event.contains("ph") && event["ph"].is_string()) << event.dump();
    ASSERT_TRUE(event.contains("pid") && event["pid"].is_number_integer()) << event.dump();
    ASSERT_TRUE(event.contains("tid") && event["tid"].is_number_integer()) << event.dump();
    const std::string phase = event["ph"];
    if (phase == "X") {
      EXPECT_TRUE(event.contains("cat") && event["cat"].is_string()) << event.dump();
      ASSERT_TRUE(event.contains("ts") && event["ts"].is_number()) << event.dump();
      ASSERT_TRUE(event.contains("dur") && event["dur"].is_number()) << event.dump();
      EXPECT_GE(event["ts"].get<double>(), 0.0) << event.dump();
      EXPECT_GE(event["dur"].get<double>(), 0.0) << event.dump();
      if (event.contains("args")) {
        EXPECT_TRUE(event["args"].is_object()) << event.dump();
      }
    } else {
      EXPECT_EQ(phase, "M") << event.dump();
      ASSERT_TRUE(event.contains("args") && event["args"].is_object()) << event.dump();
      EXPECT_TRUE(event["args"].contains("name") || event["args"].contains("sort_index")) << event.dump();
    }
  }
}

// Complete events ("X") of category `category` ("" for any).
inline std::vector<nlohmann::json> trace_spans(const nlohmann::json& trace, const std::string& category = "") {
  std::vector<nlohmann::json> spans;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.value("ph", "") == "X" && (category.empty() || event.value("cat", "") == category)) spans.push_back(event);
  }
  return spans;
}

// On every (pid, tid) any two spans are disjoint or one contains the other (to `slack_us`, the
// rounding of the written timestamps).
inline void expect_spans_nest(const nlohmann::json& trace, double slack_us = 0.002) {
  struct Interval {
    double begin, end;
    std::string name;
  };
  std::map<std::pair<int, int>, std::vector<Interval>> tracks;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event["ph"] != "X") continue;
    const double ts = event["ts"], dur = event["dur"];
    tracks[{event["pid"].get<int>(), event["tid"].get<int>()}].push_back({ts, ts + dur, event["name"]});
  }
  for (auto& [track, spans] : tracks) {
    std::sort(spans.begin(), spans.end(), [](const Interval& a, const Interval& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
    std::vector<const Interval*> open;
    for (const Interval& span : spans) {
      while (!open.empty() && open.back()->end <= span.begin + slack_us) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(span.end, open.back()->end + slack_us)
            << "pid " << track.first << " tid " << track.second << ": '" << span.name << "' [" << span.begin << ", "
            << span.end << ") partly overlaps '" << open.back()->name << "' [" << open.back()->begin << ", "
            << open.back()->end << ")";
      }
      open.push_back(&span);
    }
  }
}

// The pids with a "process_name" metadata event, and their names.
inline std::map<int, std::string> trace_processes(const nlohmann::json& trace) {
  std::map<int, std::string> names;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event["ph"] == "M" && event["name"] == "process_name") names[event["pid"].get<int>()] = event["args"]["name"];
  }
  return names;
}

}  // namespace strata::testing
