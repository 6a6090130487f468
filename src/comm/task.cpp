#include "comm/task.h"

#include <array>
#include <new>
#include <vector>

namespace strata::comm {
namespace {

// Size classes of 256 bytes up to 8 KiB; bigger frames use the heap.
constexpr size_t kClassBytes = 256;
constexpr size_t kClasses = 32;
// Frames kept per class: more than any call nests, few enough to hold little memory.
constexpr size_t kKeptPerClass = 64;

// One set for the process, as the Engine: the layer runs on one thread. Never
// destroyed, so frames released during static destruction still find it.
std::array<std::vector<void*>, kClasses>& free_lists() {
  static auto& lists = *[] {
    auto* made = new std::array<std::vector<void*>, kClasses>;
    for (auto& list : *made) list.reserve(kKeptPerClass);
    return made;
  }();
  return lists;
}

size_t class_of(size_t bytes) { return (bytes + kClassBytes - 1) / kClassBytes - 1; }

}  // namespace

void* allocate_frame(size_t bytes) {
  const size_t index = class_of(bytes);
  if (index >= kClasses) return ::operator new(bytes);
  std::vector<void*>& list = free_lists()[index];
  if (list.empty()) return ::operator new((index + 1) * kClassBytes);
  void* frame = list.back();
  list.pop_back();
  return frame;
}

void release_frame(void* frame, size_t bytes) noexcept {
  const size_t index = class_of(bytes);
  if (index >= kClasses) {
    ::operator delete(frame);
    return;
  }
  std::vector<void*>& list = free_lists()[index];
  if (list.size() >= kKeptPerClass) {
    ::operator delete(frame);
    return;
  }
  list.push_back(frame);  // within the capacity reserved: cannot throw
}

}  // namespace strata::comm
