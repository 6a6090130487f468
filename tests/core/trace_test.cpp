// The tracer (spans, tracks, lanes, recording on and off), merging ranks' parts,
// and the gap analysis on traces whose answer is known.
#include "core/trace.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/trace_analysis.h"
#include "support/trace_checks.h"

namespace strata {
namespace {

using trace::Span;
using trace::Tracer;

// A complete event as the tracer writes it.
nlohmann::json span(const std::string& name, const std::string& category, double ts, double dur, int pid = 0,
                    int tid = trace::kMainTid, nlohmann::json args = nullptr) {
  nlohmann::json event = {{"name", name}, {"cat", category}, {"ph", "X"}, {"ts", ts},
                          {"dur", dur},   {"pid", pid},      {"tid", tid}};
  if (!args.is_null()) event["args"] = std::move(args);
  return event;
}

double gap(const trace::StepGaps& gaps, const std::string& category) {
  for (size_t c = 0; c < trace::kGapCategories.size(); ++c) {
    if (trace::kGapCategories[c] == category) return gaps.ms[c];
  }
  ADD_FAILURE() << "no category " << category;
  return 0;
}

TEST(Trace, NothingIsRecordedUnlessInstalledAndRecording) {
  EXPECT_EQ(trace::active(), nullptr);
  { Span span("nobody listens", "kernel"); EXPECT_FALSE(span); }
  Tracer tracer(3);
  { Span span("not installed", "kernel"); }
  tracer.install();
  { Span span("not recording", "kernel"); }
  EXPECT_EQ(tracer.size(), 0u);
  tracer.set_recording(true);
  {
    Span outer("outer", "step");
    ASSERT_TRUE(outer);
    outer.set_args(nlohmann::json{{"step", 1}});
    Span inner("inner", "kernel");
  }
  tracer.set_recording(false);
  { Span span("after", "kernel"); }
  std::vector<trace::Event> events = tracer.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].name, "inner");  // ends first
  EXPECT_EQ(events[1].name, "outer");
  EXPECT_EQ(events[1].args, R"({"step":1})");
  EXPECT_LE(events[1].ts_us, events[0].ts_us);
  EXPECT_GE(events[1].ts_us + events[1].dur_us, events[0].ts_us + events[0].dur_us);
  EXPECT_EQ(events[0].tid, trace::kMainTid);
}

TEST(Trace, UninstallsWhenDestroyed) {
  {
    Tracer tracer(0);
    tracer.install();
    tracer.set_recording(true);
    EXPECT_EQ(trace::active(), &tracer);
  }
  EXPECT_EQ(trace::active(), nullptr);
  EXPECT_EQ(trace::installed(), nullptr);
}

TEST(Trace, ThreadsGetTracksAndTheJsonNamesThem) {
  Tracer tracer(1);
  tracer.install();
  tracer.set_recording(true);
  { Span span("on main", "kernel"); }
  std::thread worker([] { Span span("on worker", "data"); });
  worker.join();
  const int lane = tracer.acquire_lane();
  const int second = tracer.acquire_lane();  // overlapping: another lane
  EXPECT_NE(lane, second);
  tracer.add("all_reduce", "comm_flight", trace::now_us(), 5, trace::kLaneTid0 + lane);
  tracer.release_lane(lane);
  EXPECT_EQ(tracer.acquire_lane(), lane);  // free again
  tracer.set_recording(false);

  nlohmann::json json = tracer.to_json({{"host", "h"}});
  testing::expect_well_formed_trace(json);
  testing::expect_spans_nest(json);
  EXPECT_EQ(testing::trace_processes(json), (std::map<int, std::string>{{1, "rank 1"}}));
  std::map<int, std::string> threads;
  for (const nlohmann::json& event : json["traceEvents"]) {
    if (event["name"] == "thread_name") threads[event["tid"].get<int>()] = event["args"]["name"];
  }
  EXPECT_EQ(threads.at(trace::kMainTid), "main");
  EXPECT_EQ(threads.at(trace::kMainTid + 1), "thread 2");
  EXPECT_EQ(threads.at(trace::kLaneTid0 + lane), "comm in flight " + std::to_string(lane));
  EXPECT_EQ(json["otherData"]["host"], "h");
}

TEST(Trace, MergeRebasesToTheEarliestSpanAndShiftsOtherHosts) {
  auto part = [](int pid, double ts, const std::string& host, double sync) {
    return nlohmann::json{{"traceEvents", {span("step", "step", ts, 10, pid)}},
                          {"otherData", {{"host", host}, {"clock_sync_us", sync}}}};
  };
  // Rank 1 on the same host shares the clock; rank 2's clock runs 1000 us ahead of rank 0's.
  nlohmann::json merged = trace::merge_traces({part(0, 5000, "a", 9000), part(1, 5100, "a", 9050),
                                               part(2, 6200, "b", 10000)});
  std::map<int, double> ts;
  for (const nlohmann::json& event : merged["traceEvents"]) ts[event["pid"].get<int>()] = event["ts"];
  EXPECT_DOUBLE_EQ(ts[0], 0);
  EXPECT_DOUBLE_EQ(ts[1], 100);
  EXPECT_DOUBLE_EQ(ts[2], 200);
  EXPECT_EQ(merged["displayTimeUnit"], "ms");
}

TEST(Trace, SiblingPaths) {
  EXPECT_EQ(trace::sibling_path("/tmp/t.json", ".rank1.json"), "/tmp/t.rank1.json");
  EXPECT_EQ(trace::sibling_path("/tmp/t", ".gaps.json"), "/tmp/t.gaps.json");
}

TEST(TraceAnalysis, EveryInstantOfTheStepGoesToOneCategoryByPriority) {
  // A 100 us step: data 0-10; a graph run 10-70 with kernels 12-30 and 35-60 (a collective kernel
  // whose wait 40-50 is exposed communication); optimizer 75-95 holding an eager kernel 80-90 and
  // an idle barrier 90-93; the rest is other.
  nlohmann::json trace = {{"traceEvents",
                           {span("step", "step", 1000, 100, 0, 1, {{"step", 7}}),
                            span("load batch", "data", 1000, 10),
                            span("train graph", "graph", 1010, 60),
                            span("matmul", "kernel", 1012, 18),
                            span("all_reduce", "kernel", 1035, 25),
                            span("all_reduce wait", "comm", 1040, 10),
                            span("optimizer", "optimizer", 1075, 20),
                            span("adamw", "kernel", 1080, 10),
                            span("barrier wait", "idle", 1090, 3),
                            // A collective in flight on a lane, half inside the step: not part of the sum.
                            span("all_reduce", "comm_flight", 1090, 20, 0, trace::kLaneTid0),
                            // Another rank's spans do not count for this one.
                            span("matmul", "kernel", 1000, 100, 1, 1)}}};
  std::vector<trace::StepGaps> steps = trace::analyse_steps(trace);
  ASSERT_EQ(steps.size(), 1u);
  const trace::StepGaps& gaps = steps[0];
  EXPECT_EQ(gaps.step, 7);
  EXPECT_EQ(gaps.pid, 0);
  EXPECT_NEAR(gaps.step_ms, 0.100, 1e-9);
  EXPECT_NEAR(gap(gaps, "data"), 0.010, 1e-9);
  EXPECT_NEAR(gap(gaps, "compute"), 0.018 + 0.015, 1e-9);
  EXPECT_NEAR(gap(gaps, "exposed_comm"), 0.010, 1e-9);
  EXPECT_NEAR(gap(gaps, "host_overhead"), 0.002 + 0.005 + 0.010, 1e-9);
  EXPECT_NEAR(gap(gaps, "optimizer"), 0.017, 1e-9);  // the kernel inside counts as the optimizer's
  EXPECT_NEAR(gap(gaps, "idle"), 0.003, 1e-9);
  EXPECT_NEAR(gap(gaps, "other"), 0.005 + 0.005, 1e-9);
  double sum = 0;
  for (double ms : gaps.ms) sum += ms;
  EXPECT_NEAR(sum, gaps.step_ms, 1e-12);
  EXPECT_NEAR(gaps.comm_in_flight_ms, 0.010, 1e-9);
  // Top ops by the compute time they account for: the collective kernel without its wait, the
  // optimizer's kernel not at all.
  ASSERT_EQ(gaps.top_ops.size(), 2u);
  EXPECT_EQ(gaps.top_ops[0].first, "matmul");
  EXPECT_NEAR(gaps.top_ops[0].second, 0.018, 1e-9);
  EXPECT_EQ(gaps.top_ops[1].first, "all_reduce");
  EXPECT_NEAR(gaps.top_ops[1].second, 0.015, 1e-9);

  std::string text = trace::format_gap_analysis(steps);
  EXPECT_NE(text.find("exposed comm"), std::string::npos) << text;
  EXPECT_NE(text.find("all_reduce"), std::string::npos) << text;
  nlohmann::json json = trace::gaps_to_json(steps);
  EXPECT_NEAR(json["steps"][0]["share"]["data"].get<double>(), 0.1, 1e-9);
}

TEST(TraceAnalysis, NoStepsNoRows) {
  nlohmann::json trace = {{"traceEvents", {span("matmul", "kernel", 0, 10)}}};
  EXPECT_TRUE(trace::analyse_steps(trace).empty());
  EXPECT_NE(trace::format_gap_analysis({}).find("no step"), std::string::npos);
}

}  // namespace
}  // namespace strata
