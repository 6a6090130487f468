// Hostile and damaged JSON in the files Strata reads (safetensors headers,
// checkpoint manifests, corpus descriptions): deep nesting, numbers no double
// holds and wrong types are errors naming the file (and the key), never a
// crash or an unnamed failure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "data/corpus.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

std::string safetensors_with_header(const std::string& header) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xffu);
  return bytes + header;
}

TEST(HostileJson, ADeeplyNestedSafetensorsHeaderIsRefusedNotAStackOverflow) {
  TempDir dir;
  const int depth = 1'000'000;  // the fuzzer's input: a header of nested arrays
  std::string header = R"({"w":{"dtype":"F32","shape":)" + std::string(depth, '[') + std::string(depth, ']') + "}}";
  write_bytes(dir / "deep.safetensors", safetensors_with_header(header));
  std::string message = error_of([&] { SafetensorsReader reader(dir / "deep.safetensors"); });
  EXPECT_THAT(message, HasSubstr((dir / "deep.safetensors").string()));
  EXPECT_THAT(message, HasSubstr("nested deeper than"));
  EXPECT_LT(message.size(), 400u) << "the value must not be echoed";
}

TEST(HostileJson, NumbersNoDoubleHoldsNameTheFile) {
  TempDir dir;
  write_bytes(dir / "huge.safetensors", safetensors_with_header(R"({"w":{"dtype":"F32","shape":[1e400]}})"));
  EXPECT_THAT(error_of([&] { SafetensorsReader reader(dir / "huge.safetensors"); }),
              HasSubstr((dir / "huge.safetensors").string()));

  fs::create_directories(dir / "run" / "step_00000001");
  write_bytes(dir / "run" / "step_00000001" / "checkpoint.json",
              R"({"format":"strata-checkpoint","version":1,"step":1e400,"files":[],"metadata":{}})");
  EXPECT_THAT(error_of([&] { Checkpoint checkpoint(dir / "run" / "step_00000001"); }),
              HasSubstr((dir / "run" / "step_00000001" / "checkpoint.json").string()));

  fs::create_directories(dir / "corpus");
  write_bytes(dir / "corpus" / "meta.json", R"({"format":"strata-corpus","version":1,"vocab_size":1e400})");
  EXPECT_THAT(error_of([&] { read_corpus_meta(dir / "corpus"); }), HasSubstr((dir / "corpus" / "meta.json").string()));
}

TEST(HostileJson, WrongTypesInMetaJsonNameTheFileAndTheKey) {
  TempDir dir;
  fs::create_directories(dir / "corpus");
  write_bytes(dir / "corpus" / "meta.json",
              R"({"format":"strata-corpus","version":1,"tokenizer":"t.model","vocab_size":"many"})");
  std::string message = error_of([&] { read_corpus_meta(dir / "corpus"); });
  EXPECT_THAT(message, HasSubstr((dir / "corpus" / "meta.json").string()));
  EXPECT_THAT(message, HasSubstr(R"(key "vocab_size" is "many", expected an integer)"));
}

}  // namespace
}  // namespace strata
