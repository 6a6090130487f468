#include "train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace strata {

namespace {

std::atomic<int> first_signal{0};
struct sigaction previous_int, previous_term;

void on_signal(int number) {
  int expected = 0;
  if (first_signal.compare_exchange_strong(expected, number)) {
    static const char message[] =
        "strata: stopping after this step and saving a checkpoint (signal again to stop at once)\n";
    ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
    (void)ignored;
    return;
  }
  ::signal(number, SIG_DFL);
  ::raise(number);
}

}  // namespace

StopSignals::StopSignals() {
  first_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, &previous_int);
  ::sigaction(SIGTERM, &action, &previous_term);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &previous_int, nullptr);
  ::sigaction(SIGTERM, &previous_term, nullptr);
}

int StopSignals::received() { return first_signal.load(); }

}  // namespace strata
