// A libFuzzer entry point for one target, chosen at build time (STRATA_FUZZ_TARGET).
#include <cstdlib>

#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const strata::fuzz::Target target = strata::fuzz::target_named(STRATA_FUZZ_TARGET);
  if (!target) std::abort();
  target(data, size);
  return 0;
}
