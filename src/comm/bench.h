#pragma once
// comm-bench, in the manner of nccl-tests: for each size from min to max
// bytes (times factor), each algorithm (and `auto`, and the MPI library's own
// collective: `baseline`, non-blocking and polled with the timeout, and
// `baseline-blocking`, the plain blocking call) runs warm-up iterations; then
// `rounds` rounds each run `iters` timed iterations of every size and algorithm
// in turn (after one untimed call of it, so the timed ones do not start in the
// caches the previous entry emptied), so a slow minute of a shared host hurts
// all of them alike instead of a few sizes; the reported time is the median round (slowest rank), and the
// rounds' spread says how far it can be trusted. Inputs are small integers, so every result is exact
// and checked element by element before and after timing (#wrong, summed
// over ranks). With check_cost each algorithm also runs with the call check
// off, interleaved with the checked runs. Bandwidths follow nccl-tests: algbw = size / time, busbw =
// algbw * bus_bandwidth_factor. Each row also carries the cost model's
// prediction for the algorithm that ran.
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "comm/call_phases.h"
#include "comm/communicator.h"

namespace strata::comm {

struct BenchOptions {
  Collective op = Collective::AllReduce;
  DType dtype = DType::F32;
  ReduceOp reduce = ReduceOp::Sum;
  size_t min_bytes = 4096;
  size_t max_bytes = size_t{256} << 20;
  double factor = 2.0;
  int warmup = 2;
  int iters = 10;
  int rounds = 5;
  std::vector<std::string> algorithms = {"auto", "baseline", "baseline-blocking"};  // names, "auto" or a baseline
  int root = 0;
  bool in_place = false;
  // Also runs every algorithm (not the baseline) on a twin of the world group
  // with the call check off (rows marked unchecked): the check's cost (world only).
  bool check_cost = false;
  // all_to_all_v: every rank sends rank j a share 1 / (j + 1)^skew of its
  // buffer (0: equal shares), as expert loads are uneven.
  double skew = 0.0;
  // Rewrites every rank's input before each timed call (untimed; the ranks then
  // meet, and the call alone is timed), as a training step sends what it has
  // just computed (MoE tokens, gradient buckets): the input's lines sit dirty in
  // the writer's cache, not clean in the shared cache where an input exchanged
  // again and again settles (nccl-tests' way, the default).
  bool fresh_input = false;
  // Also times every algorithm's calls phase by phase (comm/call_phases.h):
  // where a call's latency goes, as the mean over ranks of `iters` calls.
  bool breakdown = false;
};

struct BenchRow {
  size_t bytes = 0;  // nccl-tests' size
  size_t count = 0;  // elements per rank's call
  std::string algorithm;  // as asked
  std::string ran;        // what ran (auto resolves to an algorithm)
  bool unchecked = false; // ran with the call check off (BenchOptions::check_cost)
  double time_us = 0.0;       // median round
  double slowest_us = 0.0;    // slowest round
  std::vector<double> round_us;  // every round, in the order run (empty: time_us is the only one)
  double algbw_GBps = 0.0;
  double busbw_GBps = 0.0;
  long long wrong = 0;
  double predicted_us = 0.0;  // NaN when the model does not price it
  std::string blocks;         // the one-host pairwise exchange: "staged", "read" or "staged N%" (exchange_blocks_label)
  double model_latency_us = 0.0;   // uncalibrated model terms, for calibration
  double model_transfer_us = 0.0;
  // With BenchOptions::breakdown (not for the baseline): microseconds per call in
  // each of kCallPhaseNames' phases, and the call check's share of them.
  std::vector<double> phase_us;
  double check_us = 0.0;
};

struct BenchReport {
  BenchOptions options;
  int ranks = 1;
  int nodes = 1;
  std::string links;  // where the link figures came from
  double memcpy_GBps = 0.0;
  std::vector<BenchRow> rows;
};

// How much a row's rounds disagree: their interquartile range over their
// median (quartiles interpolated between sorted rounds; 0 with fewer than two).
// One stray round among five leaves it alone; a host whose speed swings
// throughout the run does not.
double round_spread(const BenchRow& row);
// Past this spread the middle half of the rounds strays more than 25% either
// side of the median (the model's accuracy target): the row is unsettled, and
// the calibration fit leaves it out.
inline constexpr double kUnsettledSpread = 0.5;
inline bool unsettled(const BenchRow& row) { return round_spread(row) > kUnsettledSpread; }
// Rounds that make a settled row's median a measurement the calibration keeps
// as it is at the ends of the size range (fewer: one disturbed round could be
// the median).
inline constexpr size_t kSettlingRounds = 3;

// Parses "4096", "4K", "256M", "1G" (binary multiples). Throws naming `what`.
size_t parse_size(const std::string& text, const std::string& what);

// Collective over `group`; every rank returns the same report.
BenchReport run_bench(Communicator& group, const BenchOptions& options);
// Bytes per second of memcpy between two touched buffers of `bytes` (best of five).
double measure_memcpy_GBps(size_t bytes);

std::string format_table(const BenchReport& report);
std::string format_json(const BenchReport& report);
// Fits per-algorithm latency and bandwidth scales to the report's settled rows
// and stores them in `calibration`; returns the indices of the rows it left
// out as unsettled (an algorithm with none settled keeps its entry). It fits
// each row's median round, the time the
// benchmark reports and the planner should predict (fitting the slowest round
// made the calibrated model 30-60% slower than the medians on a busy host, and
// made the choices hinge on its worst moments). The
// bandwidth scale comes from the larger half of
// the sizes (where algorithm choices matter most), the latency scale from the
// rows the model calls latency-bound, both medians (robust to a disturbed
// measurement), then a size factor per measured size for what remains (the
// median of that size and its neighbours, so the calibrated model follows the
// measurements smoothly and interpolates between them; an end size settled
// over kSettlingRounds rounds keeps its own); algorithms without rows keep
// their entry.
std::vector<size_t> fit_calibration(const BenchReport& report, std::array<Calibration, kAlgorithmSlots>& calibration);

}  // namespace strata::comm
