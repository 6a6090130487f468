#pragma once
// Gap analysis of a trace (core/trace.h): where each step's wall time went on
// the thread that ran it. Every instant of a step span (category "step") is
// given to exactly one category, the highest-priority one among the spans of
// that thread covering it, so the parts add up to the step time by construction:
//
//   idle           span category "idle": blocked in receives, sends, barriers (waiting on peers,
//                  pipeline bubbles)
//   exposed_comm   "comm": blocked waiting for a collective (communication not hidden behind compute)
//   data           "data": loading batches
//   optimizer      "optimizer": unscaling, gradient norm, clipping, the AdamW update, ZeRO's all-gather
//   compute        "kernel": kernels
//   host_overhead  "graph" not covered by the above: the executor's time between kernels
//   other          the rest of the step (bookkeeping outside graph runs)
//
// Collectives in flight (spans on the lanes, tid >= kLaneTid0) overlap the
// step and are reported beside it (comm_in_flight_ms), not in the sum.
#include <array>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::trace {

// In priority order (highest first).
inline constexpr std::array<const char*, 7> kGapCategories = {"idle",    "exposed_comm", "data",  "optimizer",
                                                              "compute", "host_overhead", "other"};

struct StepGaps {
  int pid = 0;
  int tid = 0;
  int64_t step = 0;  // the step span's args.step
  double start_us = 0;
  double step_ms = 0;
  std::array<double, kGapCategories.size()> ms{};  // per category, in kGapCategories' order
  double comm_in_flight_ms = 0;                    // union of this rank's collectives in flight within the step
  // The compute time by op type of the outermost kernel it falls in (a collective kernel's wait is
  // exposed communication, not its compute), ms, largest first.
  std::vector<std::pair<std::string, double>> top_ops;
};

// One entry per step span of every rank, by rank then time.
std::vector<StepGaps> analyse_steps(const nlohmann::json& trace);

// The table printed at the end of a traced run, and the top `top_ops` op types over all steps.
std::string format_gap_analysis(const std::vector<StepGaps>& steps, size_t top_ops = 8);
nlohmann::json gaps_to_json(const std::vector<StepGaps>& steps);

}  // namespace strata::trace
