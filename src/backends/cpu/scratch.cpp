#include "backends/cpu/scratch.h"

#include <array>
#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace strata::cpu {

namespace {

constexpr int kSlots = 8;
constexpr size_t kAlignment = 64;

struct FreeDeleter {
  void operator()(void* data) const { std::free(data); }
};

class ScratchSet {
 public:
  void* get(int slot, size_t bytes) {
    STRATA_CHECK(slot >= 0 && slot < kSlots, "scratch slot {} out of range", slot);
    Slot& entry = slots_[static_cast<size_t>(slot)];
    if (bytes > entry.capacity) {
      size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
      entry.data.reset();  // release first: the peak stays at one buffer
      entry.data.reset(std::aligned_alloc(kAlignment, rounded));
      if (!entry.data) fail("out of memory allocating {} bytes of kernel scratch", rounded);
      entry.capacity = rounded;
    }
    return entry.data.get();
  }

 private:
  struct Slot {
    std::unique_ptr<void, FreeDeleter> data;
    size_t capacity = 0;
  };
  std::array<Slot, kSlots> slots_;
};

thread_local ScratchSet thread_set;
thread_local ScratchSet call_set;
thread_local ScratchSet widened_set;

}  // namespace

void* thread_scratch_bytes(int slot, size_t bytes) { return thread_set.get(slot, bytes); }

void* call_scratch_bytes(int slot, size_t bytes) { return call_set.get(slot, bytes); }

void* widened_scratch_bytes(int slot, size_t bytes) { return widened_set.get(slot, bytes); }

}  // namespace strata::cpu
