#include "comm/copy_pace.h"

#include <algorithm>

namespace strata::comm {
namespace {

// The newest copy's weight: the pace follows a move between cores within a
// few calls, and one copy slowed by the scheduler moves it by a quarter.
constexpr double kNewestWeight = 0.25;
// Past these bounds a reading says more about a descheduled copy than about the cores.
constexpr double kSlowest = 1.0 / 16.0, kFastest = 16.0;

}  // namespace

void CopyPace::record(double bytes, double seconds, double probed_Bps, Clock::time_point now) {
  if (bytes < kTimedBytes || !(seconds > 0.0) || !(probed_Bps > 0.0)) return;
  const double measured = std::clamp(bytes / seconds / probed_Bps, kSlowest, kFastest);
  factor_ = measured_ ? (1.0 - kNewestWeight) * factor_ + kNewestWeight * measured : measured;
  fastest_ = std::max(fastest_, factor_);
  measured_ = true;
  last_timed_ = now;
}

}  // namespace strata::comm
