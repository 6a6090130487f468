#include "comm/call_phases.h"

namespace strata::comm {

void CallPhases::start() {
  totals_ = {};
  recording_ = true;
}

CallPhaseTotals CallPhases::stop() {
  recording_ = false;
  return totals_;
}

void CallPhases::record(CallPoint point) {
  const auto index = static_cast<size_t>(point);
  points_[index] = Clock::now();
  if (point != CallPoint::Returned) return;
  for (size_t phase = 0; phase < kCallPhaseNames.size(); ++phase) {
    totals_.seconds[phase] += std::chrono::duration<double>(points_[phase + 1] - points_[phase]).count();
  }
  ++totals_.calls;
}

}  // namespace strata::comm
