// A layout run's capture files are read back with errors that name the file and what is wrong in it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "ckpt/safetensors.h"
#include "compare/rank_dump.h"
#include "support/error_text.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

fs::path capture_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("strata-rank-dump-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(RankDumpInput, ARankThatIsNotACountIsNamedWithItsFile) {
  const fs::path dir = capture_dir("rank");
  const fs::path file = dir / "rank-tp0-pp0.safetensors";
  write_safetensors(file, {{"x", Tensor::zeros({2}, DType::F32)}},
                    {{"strata.capture", "[]"}, {"strata.tp_degree", "2"}, {"strata.tp_rank", "1x"}});
  const std::string error = testing::error_of([&] { assemble_rank_dumps(dir, [](const CapturedTensor&) {}); });
  EXPECT_THAT(error, ::testing::HasSubstr(file.string()));
  EXPECT_THAT(error, ::testing::HasSubstr("metadata 'strata.tp_rank' is \"1x\", not a count"));
  fs::remove_all(dir);
}

TEST(RankDumpInput, AMissingGroupSizeIsNamedWithItsFile) {
  const fs::path dir = capture_dir("degree");
  const fs::path file = dir / "rank-tp1-pp0.safetensors";
  write_safetensors(file, {{"x", Tensor::zeros({2}, DType::F32)}}, {{"strata.capture", "[]"}, {"strata.tp_rank", "1"}});
  const std::string error = testing::error_of([&] { assemble_rank_dumps(dir, [](const CapturedTensor&) {}); });
  EXPECT_THAT(error, ::testing::HasSubstr(file.string() + ": no 'strata.tp_degree' in its metadata"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
