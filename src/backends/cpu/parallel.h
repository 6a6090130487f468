#pragma once
// OpenMP helpers shared by the cpu kernels.
#include <algorithm>
#include <cstdint>

namespace strata::cpu {

// Runs body(begin, end) over [0, count) cut into fixed chunks of `grain`
// items, in parallel when there is more than one chunk. The cut does not
// depend on the thread count, so per-chunk partial results are reproducible.
template <typename Body>
void parallel_chunks(int64_t count, int64_t grain, const Body& body) {
  int64_t chunks = (count + grain - 1) / grain;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) body(chunk * grain, std::min(count, (chunk + 1) * grain));
}

inline int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace strata::cpu
