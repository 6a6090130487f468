// Sequence parallelism's collectives beside the GEMMs next to them: Transformer Engine's Userbuffers
// schedules and PyTorch's micro-pipelined tensor parallelism (tp_overlap.h).
#include "planner/tp_overlap.h"

#include <algorithm>
#include <array>
#include <sstream>
#include <stdexcept>

#include "core/dtype.h"
#include "core/error.h"

namespace strata {

namespace {

// A layer's linears in forward order as Transformer Engine names their overlaps: attention's input
// projections and output projection, the MLP's first and second linear.
constexpr std::array<const char*, 4> kLinears = {"qkv", "proj", "fc1", "fc2"};
constexpr size_t kPairedCalls = kLinears.size();

bool by_ring_exchange(const std::string& gemm) {
  return gemm == "qkv_fprop" || gemm == "fc1_fprop" || gemm == "proj_dgrad" || gemm == "fc2_dgrad";
}
bool known_gemm(const std::string& gemm) {
  return by_ring_exchange(gemm) || gemm == "proj_fprop" || gemm == "fc2_fprop" || gemm == "qkv_wgrad" ||
         gemm == "fc1_wgrad";
}

void read_comm_units(const std::string& list, TpOverlap& overlap) {
  std::stringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t equals = item.find('=');
    const std::string gemm = item.substr(0, equals);
    if (equals == std::string::npos || !known_gemm(gemm)) {
      fail("--ub-comm-sms takes GEMM=N items with GEMM one of qkv_fprop, proj_fprop, fc1_fprop, fc2_fprop, "
           "proj_dgrad, fc2_dgrad, qkv_wgrad, fc1_wgrad; got '{}'", item);
    }
    int units = -1;
    try {
      units = std::stoi(item.substr(equals + 1));
    } catch (const std::exception&) {
    }
    if (units < 0) fail("--ub-comm-sms: '{}' does not give a non-negative number of SMs", item);
    overlap.comm_units[gemm] = units;
  }
}

// What one schedule costs with the compute beside its transfers slowed (Lee et al.'s contention).
double contended(const Schedule& schedule, double slowdown) { return schedule.seconds + slowdown * schedule.beside; }

// Userbuffers: the chunks on the SMs the communication leaves, or the contention priced as for any collective
// beside compute, whichever is the larger (both price the same contention of an SM-driven exchange).
double userbuffers_seconds(const OverlapInput& input, size_t linear, double collective, bool backward) {
  const bool column = linear % 2 == 0;  // reads the gathered input (qkv, fc1); else writes the partial sums
  const std::string name = std::string(kLinears[linear]) + (!backward ? "_fprop" : column ? "_wgrad" : "_dgrad");
  const int taken = userbuffers_comm_units(input.overlap, name);
  auto schedule = [&](bool slowed) {
    auto units = [&](double gemm) { return slowed ? with_units_taken(gemm, taken, input.compute_units) : gemm; };
    if (by_ring_exchange(name)) return ring_exchange(units(input.chunk(linear, input.ranks)), collective, input.ranks);
    const int splits = input.overlap.pipeline_splits;
    if (!backward) return pipelined(units(input.chunk(linear, splits)), collective, splits);
    return bulk(units(input.linears[linear]), collective);
  };
  return std::max(schedule(true).seconds, contended(schedule(false), input.slowdown));
}

// Async TP: the fused op's steps, or the collective exposed beside the whole GEMM where the pass leaves it.
double async_tp_seconds(const OverlapInput& input, size_t linear, const CommWork& call, double collective,
                        bool gathers) {
  const double ranks = input.ranks;
  if (!gathers && input.gemms[linear] > 1) return input.linears[linear] + collective;  // a sum feeds it
  const Schedule steps = ring_exchange(input.chunk(linear, input.ranks), collective, input.ranks);
  // The gather first copies the local shard into the symmetric buffer (read and write a shard); the
  // reduce-scatter ends by adding the ranks' partial shards (read each, write one).
  const double shard = call.bytes / ranks;
  const double edge = gathers ? input.memory(2 * shard, 0)
                              : input.memory((ranks + 1) * shard, (ranks - 1) * shard / dtype_size(call.dtype));
  return edge + contended(steps, input.slowdown);
}

}  // namespace

TpOverlap parse_tp_overlap(const std::string& runtime, const std::string& comm_units) {
  TpOverlap overlap;
  if (runtime == "userbuffers") {
    overlap.runtime = TpOverlapRuntime::Userbuffers;
  } else if (runtime == "async-tp") {
    overlap.runtime = TpOverlapRuntime::AsyncTp;
  } else if (runtime != "none") {
    fail("--tp-overlap must be none, userbuffers or async-tp, got '{}'", runtime);
  }
  if (!comm_units.empty() && overlap.runtime != TpOverlapRuntime::Userbuffers) {
    fail("--ub-comm-sms is Userbuffers' configuration: it needs --tp-overlap userbuffers");
  }
  if (!comm_units.empty()) read_comm_units(comm_units, overlap);
  return overlap;
}

int userbuffers_comm_units(const TpOverlap& overlap, const std::string& gemm) {
  auto given = overlap.comm_units.find(gemm);
  if (given != overlap.comm_units.end()) return given->second;
  return by_ring_exchange(gemm) ? 1 : 16;  // initialize_ub's default config
}

Schedule ring_exchange(double chunk, double collective, int ranks) {
  if (ranks < 2) return {chunk, 0};
  const double transfer = collective / (ranks - 1);
  return {chunk + (ranks - 1) * std::max(chunk, transfer), (ranks - 1) * std::min(chunk, transfer)};
}

Schedule pipelined(double chunk, double collective, int splits) {
  const double transfer = collective / splits;
  return {chunk + (splits - 1) * std::max(chunk, transfer) + transfer, (splits - 1) * std::min(chunk, transfer)};
}

Schedule bulk(double gemm, double collective) { return {std::max(gemm, collective), std::min(gemm, collective)}; }

double with_units_taken(double gemm, int units_taken, int compute_units) {
  if (units_taken >= compute_units) {
    fail("Userbuffers' communication takes {} SMs of the device's {}: none left for the GEMM", units_taken,
         compute_units);
  }
  return gemm * compute_units / (compute_units - units_taken);
}

std::vector<double> overlapped_seconds(const OverlapInput& input, const std::vector<CommWork>& calls,
                                       const std::vector<double>& collective, bool backward) {
  std::vector<size_t> paired;
  for (size_t i = 0; i < calls.size(); ++i) {
    const CommPattern pattern = calls[i].pattern;
    if (pattern == CommPattern::AllGather || pattern == CommPattern::ReduceScatter) paired.push_back(i);
  }
  if (paired.size() != kPairedCalls || input.linears.size() != kPairedCalls || input.gemms.size() != kPairedCalls) {
    return {};
  }
  std::vector<double> seconds = collective;
  for (size_t j = 0; j < kPairedCalls; ++j) {
    // Forward: gather before each column-parallel linear, reduce-scatter after each row-parallel one.
    // Backward, in reverse: the row-parallel linear's gradient gathered, the column-parallel one's scattered.
    const size_t linear = backward ? kPairedCalls - 1 - j : j;
    const bool gathers = (linear % 2 == 0) != backward;
    if (calls[paired[j]].pattern != (gathers ? CommPattern::AllGather : CommPattern::ReduceScatter)) return {};
    const CommWork& call = calls[paired[j]];
    const double whole = input.overlap.runtime == TpOverlapRuntime::AsyncTp
                             ? async_tp_seconds(input, linear, call, collective[paired[j]], gathers)
                             : userbuffers_seconds(input, linear, collective[paired[j]], backward);
    seconds[paired[j]] = whole - input.linears[linear];
  }
  return seconds;
}

}  // namespace strata
