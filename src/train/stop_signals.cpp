#include "train/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace strata {

namespace {

std::atomic<bool> recording{false};
std::atomic<int> first_signal{0};

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Ends the process by `number` with its default action, as if Strata had never blocked it.
[[noreturn]] void die_by(int number) {
  ::signal(number, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, number);
  ::raise(number);  // pending on this thread until the unblock below delivers it
  ::pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  ::_exit(128 + number);  // not reached: the default action terminates
}

void receive_forever() {
  const sigset_t set = stop_signal_set();
  for (;;) {
    int number = 0;
    if (::sigwait(&set, &number) != 0) continue;
    int expected = 0;
    if (recording.load() && first_signal.compare_exchange_strong(expected, number)) {
      static const char message[] =
          "strata: stopping after this step and saving a checkpoint (signal again to stop at once)\n";
      ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
      (void)ignored;
      continue;
    }
    die_by(number);
  }
}

}  // namespace

void route_stop_signals() {
  static std::once_flag started;
  std::call_once(started, [] {
    const sigset_t set = stop_signal_set();
    ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(receive_forever).detach();
  });
}

void unblock_stop_signals() {
  const sigset_t set = stop_signal_set();
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

StopSignals::StopSignals() {
  route_stop_signals();
  first_signal = 0;
  recording = true;
}

StopSignals::~StopSignals() { recording = false; }

int StopSignals::received() { return first_signal.load(); }

}  // namespace strata
