#pragma once
// Writes with streaming (non-temporal) stores, which skip reading each cache
// line before writing it, for large outputs that leave the cache before any
// reader comes: weight gradients, read by the optimizer at the step's end.
// On this project's Xeon host a streamed 113 MB write ran 2.4x faster than
// plain stores (glibc's memcpy and memset stream only past 3/4 of the L3,
// 300 MB here, far beyond what a VM's share of it holds). Each call streams
// from the destination's first 64-byte boundary on and ends with a fence.
// Plain copies stream with core/streamed_copy.h.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

// Whether an output of `bytes` is written with the functions below: 1 MiB
// and more, on a CPU with their AVX-512 stores (else callers write as usual).
// Measured on a SmolLM bf16 step: weight gradients of 1.3-3.5 MB written 2x
// faster, the optimizer's reads of them no slower; a 1 MB output read straight
// back was 1.5x slower in isolation, hence no lower.
bool streams(size_t bytes);

void zero_streamed(float* target, int64_t count);
// widen_bf16 (convert.h) into y, streamed.
void widen_bf16_streamed(const bf16* x, float* y, int64_t count);

}  // namespace strata::cpu
