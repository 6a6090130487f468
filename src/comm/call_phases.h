#pragma once
// Where a call's time goes, for `comm-bench --breakdown`. While recording, the
// layer stamps each call at six points; the gaps between them are the phases
// below, summed over the calls made since start(). Calls must run one at a
// time (blocking, or started and waited before the next): the stamps belong to
// the latest call. Not recording, a stamp is one predictable branch.
#include <array>
#include <chrono>
#include <cstdint>

namespace strata::comm {

enum class CallPoint { Entered, Decided, Launching, Launched, Finished, Returned };

// Phase i lies between point i and point i + 1.
inline constexpr std::array<const char*, 5> kCallPhaseNames = {
    "entry",       // argument checks, the group's state, the algorithm's choice (cached per shape)
    "launch",      // the operation, its label and coroutine frames
    "first step",  // the body runs until its first wait: the check posted, the algorithm's first moves
    "progress",    // polling until the body is done: data moving, waiting for peers
    "wake-up",     // from the body's end to the caller getting control back
};

struct CallPhaseTotals {
  std::array<double, kCallPhaseNames.size()> seconds{};
  double check_seconds = 0.0;  // inside the phases: posting and comparing the call check
  uint64_t calls = 0;
};

class CallPhases {
 public:
  static bool recording() { return recording_; }
  static void start();  // clears the totals and records
  static CallPhaseTotals stop();

  static void stamp(CallPoint point) {
    if (recording_) [[unlikely]] record(point);
  }
  // The call check's own time, measured around its two parts.
  class CheckTimer {
   public:
    CheckTimer() {
      if (recording_) [[unlikely]] start_ = Clock::now();
    }
    ~CheckTimer() {
      if (recording_) [[unlikely]] totals_.check_seconds += std::chrono::duration<double>(Clock::now() - start_).count();
    }
    CheckTimer(const CheckTimer&) = delete;
    CheckTimer& operator=(const CheckTimer&) = delete;

   private:
    std::chrono::steady_clock::time_point start_{};
  };

 private:
  using Clock = std::chrono::steady_clock;
  static void record(CallPoint point);
  static inline bool recording_ = false;
  static inline std::array<Clock::time_point, kCallPhaseNames.size() + 1> points_{};
  static inline CallPhaseTotals totals_{};
};

}  // namespace strata::comm
