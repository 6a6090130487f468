#pragma once
// Preemption: schedulers (SLURM, Kubernetes) send SIGTERM some time before
// they kill a job, and users press Ctrl-C. While a StopSignals object lives,
// the first SIGINT or SIGTERM only records itself (the run finishes its step,
// saves a checkpoint and ends with status 128 + signal); a second one ends
// the process at once, as the signal would have without Strata.
//
// No handler ever runs on a compute thread: oneDNN's JIT kernels keep data
// below the stack pointer, which a signal frame pushed onto their stack
// overwrites (heap corruption, seen as aborts in CI). Instead both signals
// are blocked in every thread and one thread receives them with sigwait.
namespace strata {

// Blocks SIGINT and SIGTERM in the calling thread, so in every thread it
// creates afterwards, and starts the thread that receives them. Call first
// thing in main, before any library starts a thread (a thread that existed
// before still takes the signals' default action). Idempotent.
void route_stop_signals();

// Unblocks them in the calling thread: before exec, so that the new program
// receives them normally.
void unblock_stop_signals();

class StopSignals {
 public:
  StopSignals();   // the first signal is recorded from now on (routes them if main did not)
  ~StopSignals();  // signals act immediately again
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  static int received();  // the first signal's number, 0 while none came
};

}  // namespace strata
