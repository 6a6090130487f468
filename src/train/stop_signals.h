#pragma once
// Preemption: schedulers (SLURM, Kubernetes) send SIGTERM some time before
// they kill a job, and users press Ctrl-C. While a StopSignals object lives,
// the first SIGINT or SIGTERM only records itself (the run finishes its step,
// saves a checkpoint and ends with status 128 + signal); a second one ends
// the process at once, as the signal would have without the handler.
namespace strata {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  static int received();  // the first signal's number, 0 while none came
};

}  // namespace strata
