// The cpu backend is meant to run every standard op natively in f32.
#include <gtest/gtest.h>

#include "backends/backends.h"

namespace strata {
namespace {

TEST(CpuCoverage, EveryStandardOpHasAnF32Kernel) {
  const Backend& cpu = get_backend("cpu");
  for (const std::string& op : OpRegistry::global().names()) {
    EXPECT_NE(cpu.find(op, DType::F32), nullptr) << "op '" << op << "' has no f32 kernel on cpu";
  }
}

}  // namespace
}  // namespace strata
