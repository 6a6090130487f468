#include "comm/bench.h"

#include <mpi.h>

#include <algorithm>
#include <array>
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
#include "comm/exchange_tally.h"
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

namespace {

// The q-quantile of sorted values, interpolated between neighbours.
double quantile(const std::vector<double>& sorted, double q) {
  const double position = q * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(position);
  if (below + 1 >= sorted.size()) return sorted.back();
  return sorted[below] + (position - static_cast<double>(below)) * (sorted[below + 1] - sorted[below]);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return quantile(values, 0.5);
}

// The time a row's fit uses: the median of its rounds.
double median_us(const BenchRow& row) { return row.round_us.empty() ? row.time_us : median(row.round_us); }

}  // namespace

double round_spread(const BenchRow& row) {
  if (row.round_us.size() < 2) return 0.0;
  std::vector<double> sorted = row.round_us;
  std::sort(sorted.begin(), sorted.end());
  const double middle = quantile(sorted, 0.5);
  return middle > 0.0 ? (quantile(sorted, 0.75) - quantile(sorted, 0.25)) / middle : 0.0;
}

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

namespace {

void check_options(const Communicator& group, const BenchOptions& options) {
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
}

// One requested name (no algorithm: the MPI library's own collective), run on `on`; with check_cost each
// algorithm again on an unchecked twin of the group.
struct Entry {
  std::string name;
  std::optional<Algorithm> algorithm;
  Communicator* on = nullptr;
  bool unchecked = false;
  bool blocking = false;  // baselines: the blocking MPI call
};

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::vector<Entry> requested_entries(Communicator& group, const BenchOptions& options) {
  std::vector<Entry> entries;
  for (const std::string& name : options.algorithms) {
    if (name == "baseline" || name == "baseline-blocking") {
      if (options.dtype != DType::F32) fail("comm-bench: the MPI baseline needs f32 buffers (MPI has no bf16)");
      if (group.size() != world_size()) fail("comm-bench: the MPI baseline runs on the world group only");
      entries.push_back({name, std::nullopt, &group, false, name == "baseline-blocking"});
      continue;
    }
    Algorithm algorithm = parse_algorithm(name, "comm-bench --algorithms");
    if (!implements(algorithm, options.op)) {
      fail("comm-bench: {} does not implement {}", name, collective_name(options.op));
    }
    entries.push_back({name, algorithm, &group});
  }
  return entries;
}

// `unchecked` becomes the world group with the call check off, and each algorithm gets an entry on it too.
void add_unchecked_twins(const Communicator& group, std::optional<Communicator>& unchecked, std::vector<Entry>& entries) {
  if (group.size() != world_size()) fail("comm-bench: the check's cost is measured on the world group only");
  if (group.config().call_check == CallCheck::Off) fail("comm-bench: the check's cost needs the check on (STRATA_COMM_CHECK)");
  CommConfig config = group.config();
  config.call_check = CallCheck::Off;
  unchecked.emplace(Communicator::world(config));
  for (size_t i = 0, n = entries.size(); i < n; ++i) {
    if (entries[i].algorithm) entries.push_back({entries[i].name, entries[i].algorithm, &*unchecked, true});
  }
}

bool is_exchange(Collective op) { return op == Collective::AllToAll || op == Collective::AllToAllV; }

// Buffers for the largest size, allocated and touched once (first touch is slow).
Buffers allocate_buffers(const BenchOptions& options, int p) {
  const size_t width = dtype_size(options.dtype), ranks = static_cast<size_t>(p);
  const size_t largest = count_for(options, options.max_bytes, p);
  const bool exchange = is_exchange(options.op);
  size_t in_elements = options.op == Collective::ReduceScatter || exchange ? largest * ranks : largest;
  size_t out_elements = options.op == Collective::AllGather || exchange ? largest * ranks : largest;
  if (options.op == Collective::AllToAllV) out_elements *= ranks;  // skewed: up to everything to one rank
  Buffers buffers{ScratchPool::instance().acquire(std::max<size_t>(in_elements, 1) * width),
                  ScratchPool::instance().acquire(std::max<size_t>(out_elements, 1) * width)};
  std::memset(buffers.input(), 0, in_elements * width);
  std::memset(buffers.output(), 0, out_elements * width);
  return buffers;
}

// One message size: every entry run, checked, timed round by round and priced by the model.
class SizeRun {
 public:
  SizeRun(Communicator& group, const BenchOptions& options, const std::vector<Entry>& entries, MPI_Comm baseline_comm,
          const Buffers& buffers, size_t count)
      : group_(group), options_(options), entries_(entries), baseline_comm_(baseline_comm), count_(count),
        ranks_(static_cast<size_t>(group.size())), exchange_(is_exchange(options.op)),
        bytes_(count * dtype_size(options.dtype) *
               (options.op == Collective::AllReduce || options.op == Collective::Broadcast ? 1 : ranks_)),
        exchange_counts_(exchange_ ? bench_exchange_counts(count * ranks_, group.size(),
                                                           options.op == Collective::AllToAllV ? options.skew : 0.0)
                                   : std::vector<size_t>{}),
        out_(buffers.output()),
        in_(options.in_place && options.op == Collective::AllReduce ? out_ : buffers.input()),
        rows_(entries.size()), rounds_(entries.size()), tallies_(entries.size()) {}

  // Every entry once, checked, then its warm-up iterations.
  void warm_up() {
    for (size_t a = 0; a < entries_.size(); ++a) {
      prepare();
      run_once(a);
      rows_[a].wrong = wrong_elements(a);
      for (int i = 0; i < options_.warmup; ++i) run_once(a);
    }
  }

  // One timed round of every entry; after the last, each output is checked as well (unless in
  // place with reused inputs: they changed). The buffers are shared by all sizes, so the inputs are laid out again.
  // Round r starts with entry r (mod their number): the first calls after the previous size's
  // biggest ones are the likeliest to lose their core on a shared host (a 4 KiB all-to-all took
  // 0.3-0.9 ms a call in 3 of 5 rounds as the first entry, 3-8 us as the second), so that falls
  // on every entry in turn.
  void time_round(int round, bool last) {
    prepare();
    for (size_t i = 0; i < entries_.size(); ++i) {
      const size_t a = (i + static_cast<size_t>(round)) % entries_.size();
      ExchangeTallies::take();
      rounds_[a].push_back(timed_call_s(a));
      const ExchangeTally tally = ExchangeTallies::take();
      tallies_[a].staged += tally.staged;
      tallies_[a].read += tally.read;
      if (last && (!options_.in_place || options_.fresh_input)) rows_[a].wrong += wrong_elements(a);
    }
  }

  std::vector<BenchRow> rows() {
    for (size_t a = 0; a < entries_.size() && options_.breakdown; ++a) {
      if (entries_[a].algorithm) record_phases(group_, options_.iters, [&] { run_once(a); }, rows_[a]);
    }
    for (size_t a = 0; a < entries_.size() && exchange_; ++a) {
      // Summed over ranks as floats: exact up to 2^24 blocks each.
      std::array<float, 2> local = {static_cast<float>(tallies_[a].staged), static_cast<float>(tallies_[a].read)}, sum{};
      group_.all_reduce(local.data(), sum.data(), local.size(), DType::F32, ReduceOp::Sum);
      tallies_[a] = {static_cast<uint64_t>(sum[0]), static_cast<uint64_t>(sum[1])};
    }
    for (size_t a = 0; a < entries_.size(); ++a) describe(a, rounds_[a], rows_[a]);
    return rows_;
  }

 private:
  // Lays out this rank's input (the root's buffer of a broadcast); with fresh_input keeps a copy to rewrite it from.
  void prepare() {
    const int me = group_.rank();
    if (options_.op == Collective::Broadcast && me != options_.root) return;
    void* input = options_.op == Collective::Broadcast ? out_ : in_;
    const size_t elements = options_.op == Collective::ReduceScatter || exchange_ ? count_ * ranks_ : count_;
    fill(input, options_.dtype, elements, me, 0);
    if (!options_.fresh_input) return;
    const auto* bytes = static_cast<const std::byte*>(input);
    pristine_.assign(bytes, bytes + elements * dtype_size(options_.dtype));
  }

  // Writes the input again (a copy, so the writing costs the same at every size): its lines are now dirty in this
  // rank's cache, as a just-computed input's are.
  void rewrite_input() {
    if (pristine_.empty()) return;
    std::memcpy(options_.op == Collective::Broadcast ? out_ : in_, pristine_.data(), pristine_.size());
  }

  void run_once(size_t index) {
    const Entry& entry = entries_[index];
    if (entry.blocking) return run_blocking_baseline(options_, baseline_comm_, in_, out_, count_, exchange_counts_);
    if (!entry.algorithm) {
      return run_baseline(options_, baseline_comm_, in_, out_, count_, exchange_counts_, group_.config().timeout_s);
    }
    const Algorithm algorithm = *entry.algorithm;
    Communicator& on = *entry.on;
    switch (options_.op) {
      case Collective::AllReduce: on.all_reduce(in_, out_, count_, options_.dtype, options_.reduce, algorithm); break;
      case Collective::ReduceScatter: on.reduce_scatter(in_, out_, count_, options_.dtype, options_.reduce, algorithm); break;
      case Collective::AllGather: on.all_gather(in_, out_, count_, options_.dtype, algorithm); break;
      case Collective::Broadcast: on.broadcast(out_, count_, options_.dtype, options_.root, algorithm); break;
      case Collective::AllToAll:
      case Collective::AllToAllV: run_exchange(on, options_, in_, out_, exchange_counts_, algorithm); break;
    }
  }

  // Wrong elements summed over every rank.
  long long wrong_elements(size_t index) {
    long long wrong = count_wrong(options_, group_.size(), group_.rank(), out_, count_, !entries_[index].algorithm,
                                  exchange_counts_);
    float local = static_cast<float>(wrong), total = 0.0f;
    group_.all_reduce(&local, &total, 1, DType::F32, ReduceOp::Sum);
    return static_cast<long long>(total);
  }

  // One round of `iters` calls: the slowest rank's mean seconds per call.
  double timed_call_s(size_t index) {
    run_once(index);  // untimed, as the first call after another entry's, in cold caches, would not be steady state
    if (options_.in_place && !options_.fresh_input) prepare();  // fresh inputs are rewritten before every call
    double seconds = 0.0;
    if (options_.fresh_input) {
      for (int i = 0; i < options_.iters; ++i) {
        rewrite_input();
        group_.barrier();
        auto start = Clock::now();
        run_once(index);
        seconds += std::chrono::duration<double>(Clock::now() - start).count();
      }
    } else {
      group_.barrier();
      auto start = Clock::now();
      for (int i = 0; i < options_.iters; ++i) run_once(index);
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
    float local = static_cast<float>(seconds / options_.iters);
    float slowest = 0.0f;
    group_.all_reduce(&local, &slowest, 1, DType::F32, ReduceOp::Max);
    return slowest;
  }

  // The row's figures: the median round, bandwidths as nccl-tests give them, and the model's prediction.
  void describe(size_t index, std::vector<double> times, BenchRow& row) const {
    const Entry& entry = entries_[index];
    row.round_us.clear();
    for (double seconds : times) row.round_us.push_back(seconds * 1e6);
    std::sort(times.begin(), times.end());
    const double seconds = quantile(times, 0.5);  // the median the calibration fits
    row.bytes = bytes_;
    row.count = count_;
    row.algorithm = entry.name;
    row.unchecked = entry.unchecked;
    row.time_us = seconds * 1e6;
    row.slowest_us = times.back() * 1e6;
    row.algbw_GBps = bytes_ / seconds / 1e9;
    row.busbw_GBps = row.algbw_GBps * bus_bandwidth_factor(options_.op, group_.size());
    row.predicted_us = NAN;
    if (!entry.algorithm) {
      row.ran = entry.blocking ? "MPI library, blocking" : "MPI library";
      return;
    }
    const Decision decision =
        group_.plan(options_.op, bytes_ / dtype_size(options_.dtype), options_.dtype, *entry.algorithm);
    row.ran = std::string(algorithm_name(decision.algorithm));
    row.predicted_us = decision.predicted_s * 1e6;
    if (!modeled(decision.algorithm)) return;
    ModelOptions uncalibrated = group_.model();  // its chunk and staging sizes, without the fitted scales
    uncalibrated.calibration = {};
    Cost raw;
    if (exchange_ && decision.algorithm == Algorithm::Pairwise) {
      row.blocks = exchange_blocks_label(tallies_[index]);
    }
    if (exchange_) {
      // all_to_all_v's decision cannot see the counts: the row prices them.
      raw = predict_exchange(options_, exchange_counts_, decision.algorithm, group_.topology(), uncalibrated);
      row.predicted_us =
          predict_exchange(options_, exchange_counts_, decision.algorithm, group_.topology(), group_.model()).total() * 1e6;
    } else {
      raw = predict({options_.op, static_cast<double>(bytes_), options_.dtype}, decision.algorithm, group_.topology(),
                    uncalibrated);
    }
    row.model_latency_us = raw.latency_s * 1e6;
    row.model_transfer_us = raw.transfer_s * 1e6;
  }

  Communicator& group_;
  const BenchOptions& options_;
  const std::vector<Entry>& entries_;
  MPI_Comm baseline_comm_;
  size_t count_, ranks_;
  bool exchange_;
  size_t bytes_;
  std::vector<size_t> exchange_counts_;
  void* out_;
  void* in_;
  std::vector<BenchRow> rows_;
  std::vector<std::vector<double>> rounds_;  // seconds per call, round by round
  std::vector<ExchangeTally> tallies_;       // the timed calls' exchanged blocks (exchange_tally.h); rows(): every rank's
  std::vector<std::byte> pristine_;          // fresh_input: the input as laid out, to write it again from
};

}  // namespace

BenchReport run_bench(Communicator& group, const BenchOptions& options) {
  check_options(group, options);
  std::vector<Entry> entries = requested_entries(group, options);
  std::optional<Communicator> unchecked;
  if (options.check_cost) add_unchecked_twins(group, unchecked, entries);
  MPI_Comm baseline_comm = MPI_COMM_NULL;
  if (std::any_of(entries.begin(), entries.end(), [](const Entry& entry) { return !entry.algorithm; })) {
    MPI_Comm_dup(MPI_COMM_WORLD, &baseline_comm);
  }
  BenchReport report;
  report.options = options;
  report.ranks = group.size();
  report.nodes = group.nodes();
  report.links = group.link_source().kind + " " + group.link_source().path;
  report.memcpy_GBps = measure_memcpy_GBps(std::min<size_t>(options.max_bytes, size_t{256} << 20));
  const Buffers buffers = allocate_buffers(options, group.size());
  std::vector<SizeRun> sizes;
  for (double size = static_cast<double>(options.min_bytes); size <= static_cast<double>(options.max_bytes) * 1.0000001;
       size *= options.factor) {
    const size_t count = count_for(options, static_cast<size_t>(size), group.size());
    if (count > 0) sizes.emplace_back(group, options, entries, baseline_comm, buffers, count);
  }
  for (SizeRun& size : sizes) size.warm_up();
  // Rounds sweep every size, so each size's rounds spread over the whole run.
  for (int round = 0; round < options.rounds; ++round) {
    for (SizeRun& size : sizes) size.time_round(round, round + 1 == options.rounds);
  }
  for (SizeRun& size : sizes) {
    for (BenchRow& row : size.rows()) report.rows.push_back(std::move(row));
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
  std::string text = fmt::format("# strata comm-bench: {} {}{}, {} ranks on {} node(s), {} input; links: {}\n",
                                 collective_name(options.op), dtype_name(options.dtype), detail, report.ranks,
                                 report.nodes, options.fresh_input ? "fresh" : "reused", report.links);
  text += fmt::format("# memcpy bandwidth of one rank (the ceiling): {:.2f} GB/s\n", report.memcpy_GBps);
  text += fmt::format("# time: the median of {} rounds; spread: their interquartile range over the median (past {:.0f}%:"
                      " unsettled, marked *, left out of --calibrate's fit)\n",
                      options.rounds, kUnsettledSpread * 100.0);
  text += fmt::format("# {:>11} {:>11}  {:<28} {:>11} {:>11} {:>11} {:>7} {:>13} {:>9} {:>10}\n", "size(B)", "count",
                      "algorithm", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "predicted(us)", "error(%)",
                      "spread(%)");
  for (const BenchRow& row : report.rows) {
    std::string name = row.algorithm == row.ran || row.ran.starts_with("MPI library") ? row.algorithm
                                                                               : row.algorithm + "->" + row.ran;
    if (row.unchecked) name += " unchecked";
    if (!row.blocks.empty()) name += " [" + row.blocks + "]";
    std::string predicted = std::isnan(row.predicted_us) ? "-" : fmt::format("{:.1f}", row.predicted_us);
    std::string error = std::isnan(row.predicted_us)
                            ? "-"
                            : fmt::format("{:+.0f}", (row.predicted_us - row.time_us) / row.time_us * 100.0);
    const std::string spread = fmt::format("{:.0f}{}", round_spread(row) * 100.0, unsettled(row) ? "*" : "");
    text += fmt::format("  {:>11} {:>11}  {:<28} {:>11.1f} {:>11.3f} {:>11.3f} {:>7} {:>13} {:>9} {:>10}\n", row.bytes,
                        row.count, name, row.time_us, row.algbw_GBps, row.busbw_GBps, row.wrong, predicted, error,
                        spread);
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
  json["input"] = options.fresh_input ? "fresh" : "reused";
  json["rows"] = nlohmann::json::array();
  for (const BenchRow& row : report.rows) {
    nlohmann::json entry = {{"bytes", row.bytes},         {"count", row.count},
                            {"algorithm", row.algorithm}, {"ran", row.ran}, {"call_check", !row.unchecked},
                            {"time_us", row.time_us},     {"slowest_us", row.slowest_us},
                            {"round_us", row.round_us},   {"spread", round_spread(row)},
                            {"algbw_GBps", row.algbw_GBps},
                            {"busbw_GBps", row.busbw_GBps}, {"wrong", row.wrong}};
    entry["predicted_us"] = std::isnan(row.predicted_us) ? nlohmann::json(nullptr) : nlohmann::json(row.predicted_us);
    if (!row.blocks.empty()) entry["blocks"] = row.blocks;
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

std::vector<size_t> fit_calibration(const BenchReport& report, std::array<Calibration, kAlgorithmSlots>& fitted) {
  std::vector<size_t> left_out;
  for (Algorithm algorithm : kConcreteAlgorithms) {
    if (!modeled(algorithm)) continue;
    std::vector<const BenchRow*> rows;
    for (size_t i = 0; i < report.rows.size(); ++i) {
      const BenchRow& row = report.rows[i];
      // Fitted to what runs by default: checked calls.
      if (row.ran != algorithm_name(algorithm) || row.algorithm == "baseline" || row.unchecked || !(median_us(row) > 0)) {
        continue;
      }
      if (unsettled(row)) {
        left_out.push_back(i);
      } else {
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
          bandwidth.push_back((median_us(*row) - latency_scale * row->model_latency_us) / row->model_transfer_us);
        }
      }
      if (!bandwidth.empty()) bandwidth_scale = std::clamp(median(bandwidth), 0.01, 100.0);
      for (const BenchRow* row : latency_bound) {
        if (row->model_latency_us > 0) {
          latency.push_back((median_us(*row) - bandwidth_scale * row->model_transfer_us) / row->model_latency_us);
        }
      }
      if (!latency.empty()) latency_scale = std::clamp(median(latency), 0.01, 100.0);
    }
    // What remains, size by size: the correction table, and whether every
    // row of a size was settled over rounds.
    std::vector<std::pair<double, double>> size_factors;
    std::vector<bool> settled_by_rounds;
    for (const BenchRow* row : rows) {
      double modeled_us = latency_scale * row->model_latency_us + bandwidth_scale * row->model_transfer_us;
      if (modeled_us <= 0) continue;
      double factor = std::clamp(median_us(*row) / modeled_us, 0.01, 100.0);
      const bool settled = row->round_us.size() >= kSettlingRounds;
      if (!size_factors.empty() && size_factors.back().first == static_cast<double>(row->bytes)) {
        size_factors.back().second = std::sqrt(size_factors.back().second * factor);
        settled_by_rounds.back() = settled_by_rounds.back() && settled;
      } else {
        size_factors.emplace_back(static_cast<double>(row->bytes), factor);
        settled_by_rounds.push_back(settled);
      }
    }
    // A correction should vary smoothly with size: each point takes the median
    // of itself and its neighbours, so one disturbed size cannot flip a choice;
    // inside the range that keeps a real step (the median of a, a, b is a). An
    // end point, with one neighbour, stands in for the missing one the line
    // through its two nearest (the median of two would pull a steep end
    // halfway to its neighbour: 4 KiB was predicted 20% fast that way). That
    // still erases a step between the end and its neighbour (a fixed cost that
    // only the smallest size shows: 2-rank all-to-all at 4 KiB was predicted
    // at 0.33-0.42 of its time, calibrated), so an end point whose rounds
    // settled it keeps its own factor: interleaved rounds already took out
    // what a disturbance would have put there.
    std::vector<std::pair<double, double>> smoothed = size_factors;
    const size_t points = size_factors.size();
    auto factor = [&](size_t i) { return size_factors[i].second; };
    for (size_t i = 0; i < points; ++i) {
      if ((i == 0 || i == points - 1) && settled_by_rounds[i]) continue;
      std::vector<double> window;
      for (size_t j = i == 0 ? 0 : i - 1; j <= std::min(i + 1, points - 1); ++j) window.push_back(factor(j));
      if (points >= 3 && (i == 0 || i == points - 1)) {
        const size_t near = i == 0 ? 1 : points - 2, far = i == 0 ? 2 : points - 3;
        window.push_back(std::clamp(2.0 * factor(near) - factor(far), 0.01, 100.0));
      }
      smoothed[i].second = median(window);
    }
    fitted[static_cast<size_t>(algorithm)] = {latency_scale, bandwidth_scale, smoothed};
  }
  std::sort(left_out.begin(), left_out.end());
  return left_out;
}

}  // namespace strata::comm
