// Every input in tests/fuzz/corpus/<target>/ (the crashing inputs of issue 20
// and seeds for the fuzzers) through its parser: each must be accepted or
// refused with strata::Error. Run under ASan/UBSan by scripts/fuzz.sh too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz_targets.h"

namespace strata::fuzz {
namespace {

namespace fs = std::filesystem;

TEST(FuzzCorpus, EveryInputIsParsedOrRefusedWithANamedError) {
  const fs::path corpus = fs::path(STRATA_SOURCE_DIR) / "tests" / "fuzz" / "corpus";
  size_t inputs = 0;
  for (const NamedTarget& target : targets()) {
    ASSERT_TRUE(fs::is_directory(corpus / target.name)) << target.name;
    for (const auto& entry : fs::directory_iterator(corpus / target.name)) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SCOPED_TRACE(entry.path().string());
      EXPECT_NO_THROW(target.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      ++inputs;
    }
  }
  EXPECT_GE(inputs, targets().size());
}

}  // namespace
}  // namespace strata::fuzz
