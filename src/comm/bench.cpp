#include "comm/bench.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/bench_exchange.h"
#include "comm/bench_pattern.h"
#include "comm/scratch.h"
#include "core/error.h"

namespace strata::comm {
namespace {

using Clock = std::chrono::steady_clock;

void fill(void* data, DType dtype, size_t count, int rank, size_t first_index) {
  if (dtype == DType::BF16) {
    bf16* out = static_cast<bf16*>(data);
    for (size_t i = 0; i < count; ++i) out[i] = float_to_bf16(bench_pattern(rank, first_index + i));
  } else {
    float* out = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) out[i] = bench_pattern(rank, first_index + i);
  }
}

float reduced(ReduceOp op, int ranks, size_t index, DType dtype, bool sum_only) {
  float total = bench_pattern(0, index);
  for (int rank = 1; rank < ranks; ++rank) {
    float value = bench_pattern(rank, index);
    total = op == ReduceOp::Max && !sum_only ? std::max(total, value) : total + value;
  }
  if (op == ReduceOp::Avg && !sum_only) total /= static_cast<float>(ranks);
  return dtype == DType::BF16 ? bf16_to_float(float_to_bf16(total)) : total;
}

// Elements of this rank's output that differ from the exact answer.
long long count_wrong(const BenchOptions& options, int ranks, int rank, const void* out, size_t count,
                      bool baseline, const std::vector<size_t>& exchange_counts) {
  // The MPI library has no average: the baseline computes sums.
  bool sum_only = baseline && options.reduce == ReduceOp::Avg;
  long long wrong = 0;
  switch (options.op) {
    case Collective::AllReduce:
      for (size_t i = 0; i < count; ++i) wrong += bench_load(out, options.dtype, i) != reduced(options.reduce, ranks, i, options.dtype, sum_only);
      break;
    case Collective::ReduceScatter:
      for (size_t i = 0; i < count; ++i) {
        size_t index = static_cast<size_t>(rank) * count + i;
        wrong += bench_load(out, options.dtype, i) != reduced(options.reduce, ranks, index, options.dtype, sum_only);
      }
      break;
    case Collective::AllGather:
      for (int from = 0; from < ranks; ++from) {
        for (size_t i = 0; i < count; ++i) {
          wrong += bench_load(out, options.dtype, static_cast<size_t>(from) * count + i) != bench_pattern(from, i);
        }
      }
      break;
    case Collective::Broadcast:
      for (size_t i = 0; i < count; ++i) wrong += bench_load(out, options.dtype, i) != bench_pattern(options.root, i);
      break;
    case Collective::AllToAll:
    case Collective::AllToAllV: wrong = exchange_wrong(options, out, exchange_counts, rank); break;
  }
  return wrong;
}

// The MPI library's blocking collective, as a plain MPI program calls it (MPI_Allreduce, ...):
// often faster than the non-blocking one for small messages, but it cannot time out.
void run_blocking_baseline(const BenchOptions& options, MPI_Comm comm, const void* in, void* out, size_t count,
                           const std::vector<size_t>& exchange_counts) {
  MPI_Op op = options.reduce == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  int n = static_cast<int>(count);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  switch (options.op) {
    case Collective::AllReduce: MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, n, MPI_FLOAT, op, comm); break;
    case Collective::ReduceScatter: MPI_Reduce_scatter_block(in, out, n, MPI_FLOAT, op, comm); break;
    case Collective::AllGather: MPI_Allgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comm); break;
    case Collective::Broadcast: MPI_Bcast(out, n, MPI_FLOAT, options.root, comm); break;
    case Collective::AllToAll:
    case Collective::AllToAllV: run_blocking_exchange_baseline(options, comm, in, out, exchange_counts, rank); break;
  }
}

// The MPI library's collective, the baseline of the speed target. Started non-blocking and
// waited by polling, so that a dead peer ends the job after the timeout instead of hanging it
// (a blocking MPI call never returns when the launcher keeps the job alive).
void run_baseline(const BenchOptions& options, MPI_Comm comm, const void* in, void* out, size_t count,
                  const std::vector<size_t>& exchange_counts, double timeout_s) {
  MPI_Op op = options.reduce == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  int n = static_cast<int>(count);
  MPI_Request request = MPI_REQUEST_NULL;
  MpiExchangeCounts exchange;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  switch (options.op) {
    case Collective::AllReduce:
      MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, n, MPI_FLOAT, op, comm, &request);
      break;
    case Collective::ReduceScatter: MPI_Ireduce_scatter_block(in, out, n, MPI_FLOAT, op, comm, &request); break;
    case Collective::AllGather: MPI_Iallgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comm, &request); break;
    case Collective::Broadcast: MPI_Ibcast(out, n, MPI_FLOAT, options.root, comm, &request); break;
    case Collective::AllToAll:
    case Collective::AllToAllV:
      request = start_exchange_baseline(options, comm, in, out, exchange_counts, rank, exchange);
      break;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done && std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr,
                   "strata comm error on world rank %d: %s (baseline, %zu elements of f32): no progress for %.1f s "
                   "(the timeout); a peer is gone or stopped calling\n",
                   rank, std::string(collective_name(options.op)).c_str(), count, timeout_s);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
}

struct Buffers {
  ScratchPool::Lease in, out;
  void* input() const { return in.bytes(); }
  void* output() const { return out.bytes(); }
};

// Input and output elements of one rank's call for nccl-tests size `bytes`.
size_t count_for(const BenchOptions& options, size_t bytes, int ranks) {
  size_t count = bytes / dtype_size(options.dtype);
  if (options.op != Collective::AllReduce && options.op != Collective::Broadcast) count /= static_cast<size_t>(ranks);
  return count;
}

// Runs `iters` calls phase by phase; the row gets each phase's mean over ranks, per call.
void record_phases(Communicator& group, int iters, const std::function<void()>& call, BenchRow& row) {
  group.barrier();
  CallPhases::start();
  for (int i = 0; i < iters; ++i) call();
  const CallPhaseTotals totals = CallPhases::stop();
  std::vector<float> local, sum(kCallPhaseNames.size() + 1);
  for (double seconds : totals.seconds) local.push_back(static_cast<float>(seconds / totals.calls));
  local.push_back(static_cast<float>(totals.check_seconds / totals.calls));
  group.all_reduce(local.data(), sum.data(), local.size(), DType::F32, ReduceOp::Avg);
  row.phase_us.clear();
  for (size_t phase = 0; phase < kCallPhaseNames.size(); ++phase) row.phase_us.push_back(sum[phase] * 1e6);
  row.check_us = sum.back() * 1e6;
}

}  // namespace

size_t parse_size(const std::string& text, const std::string& what) {
  if (text.empty()) fail("{}: empty size", what);
  size_t multiplier = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': multiplier = size_t{1} << 10; digits.pop_back(); break;
    case 'M': case 'm': multiplier = size_t{1} << 20; digits.pop_back(); break;
    case 'G': case 'g': multiplier = size_t{1} << 30; digits.pop_back(); break;
    default: break;
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
    fail("{}: '{}' is not a size (digits with an optional K, M or G)", what, text);
  }
  return std::stoull(digits) * multiplier;
}

double measure_memcpy_GBps(size_t bytes) {
  ScratchPool::Lease source = ScratchPool::instance().acquire(bytes);
  ScratchPool::Lease target = ScratchPool::instance().acquire(bytes);
  std::memset(source.bytes(), 1, bytes);
  std::memset(target.bytes(), 0, bytes);
  double best = 1e30;
  for (int repeat = 0; repeat < 5; ++repeat) {
    auto start = Clock::now();
    std::memcpy(target.bytes(), source.bytes(), bytes);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return bytes / best / 1e9;
}

BenchReport run_bench(Communicator& group, const BenchOptions& options) {
  if (options.min_bytes == 0 || options.max_bytes < options.min_bytes) {
    fail("comm-bench: sizes must satisfy 0 < min ({}) <= max ({})", options.min_bytes, options.max_bytes);
  }
  if (!(options.factor > 1.0)) fail("comm-bench: the step factor must be > 1, got {}", options.factor);
  if (options.iters < 1 || options.rounds < 1 || options.warmup < 0) {
    fail("comm-bench: iterations ({}) and rounds ({}) must be >= 1, warm-up ({}) >= 0", options.iters,
         options.rounds, options.warmup);
  }
  if (options.root < 0 || options.root >= group.size()) fail("comm-bench: root {} is not a rank", options.root);
  if (options.algorithms.empty()) fail("comm-bench: no algorithms to run");
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  // One entry per requested name (empty algorithm: the MPI library's own collective), each
  // run on `group`, and with check_cost each algorithm again on an unchecked twin.
  struct Entry {
    std::string name;
    std::optional<Algorithm> algorithm;
    Communicator* on = nullptr;
    bool unchecked = false;
    bool blocking = false;  // baselines: the blocking MPI call
  };
  std::vector<Entry> entries;
  for (const std::string& name : options.algorithms) {
    if (name == "baseline" || name == "baseline-blocking") {
      if (options.dtype != DType::F32) fail("comm-bench: the MPI baseline needs f32 buffers (MPI has no bf16)");
      if (group.size() != world_size) fail("comm-bench: the MPI baseline runs on the world group only");
      entries.push_back({name, std::nullopt, &group, false, name == "baseline-blocking"});
      continue;
    }
    Algorithm algorithm = parse_algorithm(name, "comm-bench --algorithms");
    if (!implements(algorithm, options.op)) {
      fail("comm-bench: {} does not implement {}", name, collective_name(options.op));
    }
    entries.push_back({name, algorithm, &group});
  }
  std::optional<Communicator> unchecked;
  if (options.check_cost) {
    if (group.size() != world_size) fail("comm-bench: the check's cost is measured on the world group only");
    if (group.config().call_check == CallCheck::Off) fail("comm-bench: the check's cost needs the check on (STRATA_COMM_CHECK)");
    CommConfig config = group.config();
    config.call_check = CallCheck::Off;
    unchecked = Communicator::world(config);
    for (size_t i = 0, n = entries.size(); i < n; ++i) {
      if (entries[i].algorithm) entries.push_back({entries[i].name, entries[i].algorithm, &*unchecked, true});
    }
  }
  MPI_Comm baseline_comm = MPI_COMM_NULL;
  if (std::any_of(entries.begin(), entries.end(), [](const Entry& entry) { return !entry.algorithm; })) {
    MPI_Comm_dup(MPI_COMM_WORLD, &baseline_comm);
  }

  const int p = group.size();
  const int me = group.rank();
  const size_t width = dtype_size(options.dtype);
  BenchReport report;
  report.options = options;
  report.ranks = p;
  report.nodes = group.nodes();
  report.links = group.link_source().kind + " " + group.link_source().path;
  report.memcpy_GBps = measure_memcpy_GBps(std::min<size_t>(options.max_bytes, size_t{256} << 20));

  // Buffers for the largest size, allocated once (first touch is slow).
  size_t largest = count_for(options, options.max_bytes, p);
  const bool exchange = options.op == Collective::AllToAll || options.op == Collective::AllToAllV;
  const size_t ranks = static_cast<size_t>(p);
  size_t in_elements = options.op == Collective::ReduceScatter || exchange ? largest * ranks : largest;
  size_t out_elements = options.op == Collective::AllGather || exchange ? largest * ranks : largest;
  if (options.op == Collective::AllToAllV) out_elements *= ranks;  // skewed: up to everything to one rank
  Buffers buffers{ScratchPool::instance().acquire(std::max<size_t>(in_elements, 1) * width),
                  ScratchPool::instance().acquire(std::max<size_t>(out_elements, 1) * width)};
  std::memset(buffers.input(), 0, in_elements * width);
  std::memset(buffers.output(), 0, out_elements * width);

  for (double size = static_cast<double>(options.min_bytes); size <= static_cast<double>(options.max_bytes) * 1.0000001;
       size *= options.factor) {
    size_t count = count_for(options, static_cast<size_t>(size), p);
    size_t bytes = count * width * ((options.op == Collective::AllReduce || options.op == Collective::Broadcast) ? 1 : ranks);
    if (count == 0) continue;
    const std::vector<size_t> exchange_counts =
        exchange ? bench_exchange_counts(count * ranks, p, options.op == Collective::AllToAllV ? options.skew : 0.0)
                 : std::vector<size_t>{};
    size_t model_count = bytes / width;
    void* out = buffers.output();
    void* in = options.in_place && options.op == Collective::AllReduce ? out : buffers.input();
    auto prepare = [&] {
      size_t input_count = options.op == Collective::ReduceScatter || exchange ? count * ranks : count;
      if (options.op == Collective::Broadcast) {
        if (me == options.root) fill(out, options.dtype, count, me, 0);
      } else {
        fill(in, options.dtype, input_count, me, 0);
      }
    };
    auto run_once = [&](size_t index) {
      if (entries[index].blocking) {
        run_blocking_baseline(options, baseline_comm, in, out, count, exchange_counts);
        return;
      }
      if (!entries[index].algorithm) {
        run_baseline(options, baseline_comm, in, out, count, exchange_counts, group.config().timeout_s);
        return;
      }
      Algorithm algorithm = *entries[index].algorithm;
      Communicator& on = *entries[index].on;
      switch (options.op) {
        case Collective::AllReduce: on.all_reduce(in, out, count, options.dtype, options.reduce, algorithm); break;
        case Collective::ReduceScatter: on.reduce_scatter(in, out, count, options.dtype, options.reduce, algorithm); break;
        case Collective::AllGather: on.all_gather(in, out, count, options.dtype, algorithm); break;
        case Collective::Broadcast: on.broadcast(out, count, options.dtype, options.root, algorithm); break;
        case Collective::AllToAll:
        case Collective::AllToAllV: run_exchange(on, options, in, out, exchange_counts, algorithm); break;
      }
    };
    auto check = [&](size_t index) {
      long long wrong = count_wrong(options, p, me, out, count, !entries[index].algorithm, exchange_counts);
      float local = static_cast<float>(wrong), total = 0.0f;
      group.all_reduce(&local, &total, 1, DType::F32, ReduceOp::Sum);
      return static_cast<long long>(total);
    };

    std::vector<BenchRow> rows(entries.size());
    std::vector<std::vector<double>> rounds(entries.size());
    for (size_t a = 0; a < entries.size(); ++a) {
      prepare();
      run_once(a);
      rows[a].wrong = check(a);
      for (int i = 0; i < options.warmup; ++i) run_once(a);
    }
    for (int round = 0; round < options.rounds; ++round) {
      for (size_t a = 0; a < entries.size(); ++a) {
        if (options.in_place) prepare();
        group.barrier();
        auto start = Clock::now();
        for (int i = 0; i < options.iters; ++i) run_once(a);
        float local = static_cast<float>(std::chrono::duration<double>(Clock::now() - start).count() / options.iters);
        float slowest = 0.0f;
        group.all_reduce(&local, &slowest, 1, DType::F32, ReduceOp::Max);
        rounds[a].push_back(slowest);
      }
    }
    if (options.breakdown) {
      for (size_t a = 0; a < entries.size(); ++a) {
        if (entries[a].algorithm) record_phases(group, options.iters, [&] { run_once(a); }, rows[a]);
      }
    }
    for (size_t a = 0; a < entries.size(); ++a) {
      BenchRow& row = rows[a];
      // The output of the last timed iteration must be right as well (unless in place: inputs changed).
      if (!options.in_place) row.wrong += check(a);
      std::vector<double>& times = rounds[a];
      std::sort(times.begin(), times.end());
      double seconds = times[times.size() / 2];
      row.bytes = bytes;
      row.count = count;
      row.algorithm = entries[a].name;
      row.unchecked = entries[a].unchecked;
      row.time_us = seconds * 1e6;
      row.slowest_us = times.back() * 1e6;
      row.algbw_GBps = bytes / seconds / 1e9;
      row.busbw_GBps = row.algbw_GBps * bus_bandwidth_factor(options.op, p);
      row.predicted_us = NAN;
      if (!entries[a].algorithm) {
        row.ran = entries[a].blocking ? "MPI library, blocking" : "MPI library";
      } else {
        Decision decision = group.plan(options.op, model_count, options.dtype, *entries[a].algorithm);
        row.ran = std::string(algorithm_name(decision.algorithm));
        row.predicted_us = decision.predicted_s * 1e6;
        if (exchange && modeled(decision.algorithm)) {
          // all_to_all_v's decision cannot see the counts: the row prices them.
          ModelOptions uncalibrated;
          Cost raw = predict_exchange(options, exchange_counts, decision.algorithm, group.topology(), uncalibrated);
          row.predicted_us =
              predict_exchange(options, exchange_counts, decision.algorithm, group.topology(), group.model()).total() * 1e6;
          row.model_latency_us = raw.latency_s * 1e6;
          row.model_transfer_us = raw.transfer_s * 1e6;
        } else if (modeled(decision.algorithm)) {
          CallShape shape{options.op, static_cast<double>(bytes), options.dtype};
          ModelOptions uncalibrated;
          uncalibrated.chunk_bytes = group.model().chunk_bytes;
          Cost raw = predict(shape, decision.algorithm, group.topology(), uncalibrated);
          row.model_latency_us = raw.latency_s * 1e6;
          row.model_transfer_us = raw.transfer_s * 1e6;
        }
      }
      report.rows.push_back(row);
    }
  }
  if (baseline_comm != MPI_COMM_NULL) MPI_Comm_free(&baseline_comm);
  return report;
}

namespace {

// The per-call phases of each row that has them (comm/call_phases.h).
std::string format_breakdown(const BenchReport& report) {
  std::string text = fmt::format("# per call, microseconds (mean over ranks); the check's time is inside the phases\n");
  text += fmt::format("# {:>11}  {:<28} {:>9}", "size(B)", "algorithm", "sum");
  for (const char* phase : kCallPhaseNames) text += fmt::format(" {:>11}", phase);
  text += fmt::format(" {:>9}\n", "check");
  for (const BenchRow& row : report.rows) {
    if (row.phase_us.empty()) continue;
    double sum = 0.0;
    for (double us : row.phase_us) sum += us;
    std::string name = row.algorithm == row.ran ? row.algorithm : row.algorithm + "->" + row.ran;
    if (row.unchecked) name += " unchecked";
    text += fmt::format("  {:>11}  {:<28} {:>9.2f}", row.bytes, name, sum);
    for (double us : row.phase_us) text += fmt::format(" {:>11.2f}", us);
    text += fmt::format(" {:>9.2f}\n", row.check_us);
  }
  return text;
}

}  // namespace

std::string format_table(const BenchReport& report) {
  const BenchOptions& options = report.options;
  std::string detail;
  if (options.op == Collective::AllReduce || options.op == Collective::ReduceScatter) {
    detail = fmt::format(" {}", reduce_op_name(options.reduce));
  }
  if (options.op == Collective::AllToAllV) detail = fmt::format(" skew {:g}", options.skew);
  std::string text = fmt::format("# strata comm-bench: {} {}{}, {} ranks on {} node(s); links: {}\n",
                                 collective_name(options.op), dtype_name(options.dtype), detail, report.ranks,
                                 report.nodes, report.links);
  text += fmt::format("# memcpy bandwidth of one rank (the ceiling): {:.2f} GB/s\n", report.memcpy_GBps);
  text += fmt::format("# {:>11} {:>11}  {:<28} {:>11} {:>11} {:>11} {:>7} {:>13} {:>9}\n", "size(B)", "count",
                      "algorithm", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "predicted(us)", "error(%)");
  for (const BenchRow& row : report.rows) {
    std::string name = row.algorithm == row.ran || row.ran.starts_with("MPI library") ? row.algorithm
                                                                               : row.algorithm + "->" + row.ran;
    if (row.unchecked) name += " unchecked";
    std::string predicted = std::isnan(row.predicted_us) ? "-" : fmt::format("{:.1f}", row.predicted_us);
    std::string error = std::isnan(row.predicted_us)
                            ? "-"
                            : fmt::format("{:+.0f}", (row.predicted_us - row.time_us) / row.time_us * 100.0);
    text += fmt::format("  {:>11} {:>11}  {:<28} {:>11.1f} {:>11.3f} {:>11.3f} {:>7} {:>13} {:>9}\n", row.bytes,
                        row.count, name, row.time_us, row.algbw_GBps, row.busbw_GBps, row.wrong, predicted, error);
  }
  if (options.breakdown) text += format_breakdown(report);
  return text;
}

std::string format_json(const BenchReport& report) {
  const BenchOptions& options = report.options;
  nlohmann::json json;
  json["collective"] = collective_name(options.op);
  json["dtype"] = dtype_name(options.dtype);
  json["reduce"] = reduce_op_name(options.reduce);
  json["ranks"] = report.ranks;
  json["nodes"] = report.nodes;
  json["links"] = report.links;
  json["memcpy_GBps"] = report.memcpy_GBps;
  json["warmup"] = options.warmup;
  json["iters"] = options.iters;
  json["rounds"] = options.rounds;
  json["rows"] = nlohmann::json::array();
  for (const BenchRow& row : report.rows) {
    nlohmann::json entry = {{"bytes", row.bytes},         {"count", row.count},
                            {"algorithm", row.algorithm}, {"ran", row.ran}, {"call_check", !row.unchecked},
                            {"time_us", row.time_us},     {"slowest_us", row.slowest_us},
                            {"algbw_GBps", row.algbw_GBps},
                            {"busbw_GBps", row.busbw_GBps}, {"wrong", row.wrong}};
    entry["predicted_us"] = std::isnan(row.predicted_us) ? nlohmann::json(nullptr) : nlohmann::json(row.predicted_us);
    if (!row.phase_us.empty()) {
      nlohmann::json phases;
      for (size_t phase = 0; phase < row.phase_us.size(); ++phase) phases[kCallPhaseNames[phase]] = row.phase_us[phase];
      phases["check (inside the phases)"] = row.check_us;
      entry["phases_us"] = phases;
    }
    json["rows"].push_back(entry);
  }
  return json.dump(2) + "\n";
}

void fit_calibration(const BenchReport& report, std::array<Calibration, kAlgorithmSlots>& fitted) {
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    size_t middle = values.size() / 2;
    return values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
  };
  for (Algorithm algorithm : kConcreteAlgorithms) {
    if (!modeled(algorithm)) continue;
    std::vector<const BenchRow*> rows;
    for (const BenchRow& row : report.rows) {
      // Fitted to what runs by default: checked calls.
      if (row.ran == algorithm_name(algorithm) && row.algorithm != "baseline" && !row.unchecked && row.time_us > 0) {
        rows.push_back(&row);
      }
    }
    if (rows.empty()) continue;
    // The bandwidth scale comes from the larger half of the sizes, the latency
    // scale from the rows the latency terms dominate; medians shrug off the
    // odd disturbed measurement, and a few rounds settle the two together.
    std::sort(rows.begin(), rows.end(), [](const BenchRow* a, const BenchRow* b) { return a->bytes < b->bytes; });
    std::vector<const BenchRow*> large(rows.begin() + static_cast<long>(rows.size() / 2), rows.end());
    std::vector<const BenchRow*> latency_bound;
    for (const BenchRow* row : rows) {
      if (row->model_latency_us >= row->model_transfer_us) latency_bound.push_back(row);
    }
    double latency_scale = 1.0, bandwidth_scale = 1.0;
    for (int round = 0; round < 50; ++round) {
      std::vector<double> bandwidth, latency;
      for (const BenchRow* row : large) {
        if (row->model_transfer_us > 0) {
          bandwidth.push_back((row->time_us - latency_scale * row->model_latency_us) / row->model_transfer_us);
        }
      }
      if (!bandwidth.empty()) bandwidth_scale = std::clamp(median(bandwidth), 0.01, 100.0);
      for (const BenchRow* row : latency_bound) {
        if (row->model_latency_us > 0) {
          latency.push_back((row->time_us - bandwidth_scale * row->model_transfer_us) / row->model_latency_us);
        }
      }
      if (!latency.empty()) latency_scale = std::clamp(median(latency), 0.01, 100.0);
    }
    // What remains, size by size: the correction table.
    std::vector<std::pair<double, double>> size_factors;
    for (const BenchRow* row : rows) {
      double modeled_us = latency_scale * row->model_latency_us + bandwidth_scale * row->model_transfer_us;
      if (modeled_us <= 0) continue;
      double factor = std::clamp(row->time_us / modeled_us, 0.01, 100.0);
      if (!size_factors.empty() && size_factors.back().first == static_cast<double>(row->bytes)) {
        size_factors.back().second = std::sqrt(size_factors.back().second * factor);
      } else {
        size_factors.emplace_back(static_cast<double>(row->bytes), factor);
      }
    }
    // A correction should vary smoothly with size: each point takes the median
    // of itself and its neighbours, so one disturbed size cannot flip a choice.
    std::vector<std::pair<double, double>> smoothed = size_factors;
    for (size_t i = 0; i < size_factors.size(); ++i) {
      std::vector<double> window;
      for (size_t j = i == 0 ? 0 : i - 1; j <= std::min(i + 1, size_factors.size() - 1); ++j) {
        window.push_back(size_factors[j].second);
      }
      smoothed[i].second = median(window);
    }
    fitted[static_cast<size_t>(algorithm)] = {latency_scale, bandwidth_scale, smoothed};
  }
}

}  // namespace strata::comm
