#pragma once
// Scratch memory for the cpu kernels that grows to the largest request and is
// kept: memory fresh from the kernel is slow to touch on the machines Strata
// targets, so kernels never allocate temporaries per call.
#include <cstddef>

namespace strata::cpu {

// Per-thread buffers, for work inside one OpenMP task (tiles, packed heads).
// `slot` (0..7) keeps the buffers a task uses at once apart; the contents of
// a slot are undefined on return and its pointer is valid until the same
// thread asks for that slot again.
void* thread_scratch_bytes(int slot, size_t bytes);

// Buffers of the calling thread shared with an OpenMP team it then starts
// (per-chunk partial sums, index tables). Separate from thread_scratch, which
// the calling thread also uses as a team member.
void* call_scratch_bytes(int slot, size_t bytes);

// Buffers of the calling thread for the f32 copies of a kernel's narrow
// inputs and outputs (cpu_through_f32.cpp), apart from the call and thread
// buffers the f32 kernel itself then uses.
void* widened_scratch_bytes(int slot, size_t bytes);

template <typename T>
T* thread_scratch(int slot, size_t count) {
  return static_cast<T*>(thread_scratch_bytes(slot, count * sizeof(T)));
}

template <typename T>
T* call_scratch(int slot, size_t count) {
  return static_cast<T*>(call_scratch_bytes(slot, count * sizeof(T)));
}

}  // namespace strata::cpu
