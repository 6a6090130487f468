// Sequence parallelism's collectives beside the GEMMs next to them: Transformer Engine's Userbuffers
// schedules and PyTorch's micro-pipelined tensor parallelism (tp_overlap.h).
#include "planner/tp_overlap.h"

#include <algorithm>
#include <array>
#include <sstream>
#include <stdexcept>

#include "core/error.h"

namespace strata {

namespace {

// A layer's linears in forward order as Transformer Engine names their overlaps: attention's input
// projections and output projection, the MLP's first and second linear.
constexpr std::array<const char*, 4> kLinears = {"qkv", "proj", "fc1", "fc2"};
constexpr size_t kPairedCalls = kLinears.size();

bool ring_exchange(const std::string& gemm) {
  return gemm == "qkv_fprop" || gemm == "fc1_fprop" || gemm == "proj_dgrad" || gemm == "fc2_dgrad";
}
bool known_gemm(const std::string& gemm) {
  return ring_exchange(gemm) || gemm == "proj_fprop" || gemm == "fc2_fprop" || gemm == "qkv_wgrad" ||
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

// One paired call: the linear it runs beside, the schedule, and the compute units its communication takes.
double paired_seconds(const OverlapInput& input, size_t linear, double collective, bool backward) {
  const double gemm = input.linears[linear];
  const bool column = linear % 2 == 0;  // reads the gathered input (qkv, fc1); else writes the partial sums
  if (input.overlap.runtime == TpOverlapRuntime::AsyncTp) return ring_exchange_seconds(gemm, collective, input.ranks);
  const std::string name = std::string(kLinears[linear]) + (!backward ? "_fprop" : column ? "_wgrad" : "_dgrad");
  const double slowed = with_units_taken(gemm, userbuffers_comm_units(input.overlap, name), input.compute_units);
  if (ring_exchange(name)) return ring_exchange_seconds(slowed, collective, input.ranks);
  if (!backward) return pipelined_seconds(slowed, collective, input.overlap.pipeline_splits);
  return bulk_seconds(slowed, collective);
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
  return ring_exchange(gemm) ? 1 : 16;  // initialize_ub's default config
}

double ring_exchange_seconds(double gemm, double collective, int ranks) {
  if (ranks < 2) return gemm;
  const double step = gemm / ranks, transfer = collective / (ranks - 1);
  return step + (ranks - 1) * std::max(step, transfer);
}

double pipelined_seconds(double gemm, double collective, int splits) {
  const double step = gemm / splits, transfer = collective / splits;
  return step + (splits - 1) * std::max(step, transfer) + transfer;
}

double bulk_seconds(double gemm, double collective) { return std::max(gemm, collective); }

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
  if (paired.size() != kPairedCalls || input.linears.size() != kPairedCalls) return {};
  std::vector<double> seconds = collective;
  for (size_t j = 0; j < kPairedCalls; ++j) {
    // Forward: gather before each column-parallel linear, reduce-scatter after each row-parallel one.
    // Backward, in reverse: the row-parallel linear's gradient gathered, the column-parallel one's scattered.
    const size_t linear = backward ? kPairedCalls - 1 - j : j;
    const bool gathers = (linear % 2 == 0) != backward;
    if (calls[paired[j]].pattern != (gathers ? CommPattern::AllGather : CommPattern::ReduceScatter)) return {};
    const double whole = paired_seconds(input, linear, collective[paired[j]], backward);
    seconds[paired[j]] = whole - input.linears[linear];
  }
  return seconds;
}

}  // namespace strata
