#pragma once
// How fast a rank's copies into its exchange area run now, against the
// probe's curve. Where the node's ranks sit decides it: on cores that share a
// cache a block crosses in cache; on cores that do not (another core complex,
// another socket) every line written must first be taken from the peer core
// that read it last. A VM's hypervisor moves its vCPUs between such cores
// within a second (a 2-core EPYC VM, 2 ranks: 4 KiB blocks copied in at 17.8
// GB/s or at 3 GB/s, switching several times in one launch), while the
// probe's curve holds the moment it was measured. The one-host all-to-all
// times its copies into the area, weighs staging against reading with the
// curve's copy rate scaled by this pace, and, while it reads every block,
// stages one now and then to see whether copies have become fast again.
#include <chrono>

namespace strata::comm {

class CopyPace {
 public:
  using Clock = std::chrono::steady_clock;
  // How long a rank that reads every block goes without timing a copy: on the
  // EPYC VM the cores moved after 150 ms at the quickest, and one check (one
  // block staged where reading is faster) costs about a call, a few per cent
  // of 5 ms's calls at worst.
  static constexpr Clock::duration kCheckInterval = std::chrono::milliseconds(5);
  // Copies shorter than this are not timed: the clock's own cost (tens of ns)
  // blurs their rate (timing 2 KiB blocks turned 4-16 KiB exchanges to reads,
  // which run them up to 20% slower), and staging wins for them either way.
  static constexpr double kTimedBytes = 16384.0;

  // The measured rate over the probed one, smoothed over the latest copies (1 before any).
  double factor() const { return factor_; }
  // The fastest factor the smoothing has reached, or 1 (the probe's pace) if never faster.
  double fastest() const { return fastest_; }
  // `bytes` copied into the area took `seconds`, ending at `now`, where the probe's curve gives `probed_Bps`.
  void record(double bytes, double seconds, double probed_Bps, Clock::time_point now);
  // For a call that would read every block: whether it should stage one to time the copies.
  bool check_due(Clock::time_point now) const { return now - last_timed_ >= kCheckInterval; }

 private:
  double factor_ = 1.0;
  double fastest_ = 1.0;
  bool measured_ = false;
  Clock::time_point last_timed_{};
};

}  // namespace strata::comm
