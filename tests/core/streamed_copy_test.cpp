#include "core/streamed_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace strata {
namespace {

// Every size around the 64-byte stores' edges, at every alignment of source
// and target against them: the bytes copied are the source's, and the bytes
// either side of the target are untouched.
TEST(StreamedCopy, CopiesEveryByteAndNothingElse) {
  constexpr size_t kGuard = 80;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{31}, size_t{63}, size_t{64}, size_t{65}, size_t{127},
                       size_t{128}, size_t{1000}, size_t{(1 << 20) + 37}}) {
    for (size_t source_shift : {size_t{0}, size_t{1}, size_t{32}, size_t{61}}) {
      for (size_t target_shift : {size_t{0}, size_t{3}, size_t{32}, size_t{63}}) {
        std::vector<uint8_t> source(bytes + 64);
        for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 131 + 7);
        alignas(64) static uint8_t target_buffer[(1 << 20) + 37 + 2 * kGuard + 64];
        uint8_t* target = target_buffer + kGuard + target_shift;
        std::fill(std::begin(target_buffer), std::end(target_buffer), uint8_t{0xA5});
        copy_streamed(source.data() + source_shift, target, bytes);
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(target[i], source[source_shift + i])
              << "byte " << i << " of " << bytes << ", source shift " << source_shift << ", target shift "
              << target_shift;
        }
        for (uint8_t* guard = target_buffer; guard < target; ++guard) ASSERT_EQ(*guard, 0xA5);
        for (uint8_t* guard = target + bytes; guard < std::end(target_buffer); ++guard) ASSERT_EQ(*guard, 0xA5);
      }
    }
  }
}

}  // namespace
}  // namespace strata
