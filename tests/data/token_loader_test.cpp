// The loader's windows against the documented rule, restated here over plain
// vectors, and exact resumption from a saved position.
#include "data/token_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TempDir;

using testing::error_of;

constexpr int64_t kVocab = 70000;  // above every token the tests write

std::vector<int32_t> values(const Tensor& tensor) {
  return std::vector<int32_t>(tensor.data<int32_t>(), tensor.data<int32_t>() + tensor.numel());
}

std::vector<int32_t> iota(int32_t start, int32_t count) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), start);
  return tokens;
}

TEST(TokenLoader, WindowsOfAHandWorkedExample) {
  TempDir dir;
  write_token_shard(dir / "a.bin", iota(0, 10), 1000);
  write_token_shard(dir / "b.bin", iota(100, 5), 1000);
  TokenLoader loader({dir / "a.bin", dir / "b.bin"}, 1, 3, kVocab);
  // a: p=0, 3, 6 fit (6+3+1 <= 10); p=9 does not, so b at 0; b: p=0 fits, p=3
  // does not (3+4 > 5), so back to a.
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> expected = {
      {{0, 1, 2}, {1, 2, 3}},         {{3, 4, 5}, {4, 5, 6}}, {{6, 7, 8}, {7, 8, 9}},
      {{100, 101, 102}, {101, 102, 103}}, {{0, 1, 2}, {1, 2, 3}},
  };
  for (const auto& [inputs, targets] : expected) {
    TokenBatch batch = loader.next();
    EXPECT_EQ(batch.inputs.shape(), (Shape{1, 3}));
    EXPECT_EQ(batch.inputs.dtype(), DType::I32);
    EXPECT_EQ(values(batch.inputs), inputs);
    EXPECT_EQ(values(batch.targets), targets);
  }
}

// The rule from data/README.md over in-memory shards.
struct ReferenceLoader {
  std::vector<std::vector<int32_t>> shards;
  int64_t rows, columns;
  size_t shard = 0;
  size_t offset = 0;

  std::pair<std::vector<int32_t>, std::vector<int32_t>> next() {
    size_t window = static_cast<size_t>(rows * columns);
    if (offset + window + 1 > shards[shard].size()) {
      shard = (shard + 1) % shards.size();
      offset = 0;
    }
    const auto& tokens = shards[shard];
    std::vector<int32_t> inputs(tokens.begin() + static_cast<long>(offset),
                                tokens.begin() + static_cast<long>(offset + window));
    std::vector<int32_t> targets(tokens.begin() + static_cast<long>(offset + 1),
                                 tokens.begin() + static_cast<long>(offset + window + 1));
    offset += window;
    return {inputs, targets};
  }
};

TEST(TokenLoader, MatchesTheRuleOverManyShardsAndWraps) {
  TempDir dir;
  const std::vector<int32_t> sizes{97, 41, 160};
  ReferenceLoader reference{{}, 4, 5};
  std::vector<fs::path> paths;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<int32_t> tokens(static_cast<size_t>(sizes[s]));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((s * 7919 + i * 31) % 70000);
    paths.push_back(dir / fmt::format("s{}.bin", s));
    // A mix of uint16 and uint32 shards.
    write_token_shard(paths.back(), tokens, s == 1 ? 65536 : 70000);
    reference.shards.push_back(tokens);
  }
  TokenLoader loader(paths, 4, 5, kVocab);
  Tensor inputs = Tensor::empty({4, 5}, DType::I32);
  Tensor targets = Tensor::empty({4, 5}, DType::I32);
  for (int step = 0; step < 40; ++step) {  // several full passes over all shards
    SCOPED_TRACE(step);
    auto [expected_inputs, expected_targets] = reference.next();
    loader.next(inputs, targets);
    EXPECT_EQ(values(inputs), expected_inputs);
    EXPECT_EQ(values(targets), expected_targets);
    EXPECT_EQ(loader.position().shard, static_cast<int64_t>(reference.shard));
    EXPECT_EQ(loader.position().offset, static_cast<int64_t>(reference.offset));
  }
}

TEST(TokenLoader, ResumesExactlyFromASavedPosition) {
  TempDir dir;
  write_token_shard(dir / "a.bin", iota(0, 50), 1000);
  write_token_shard(dir / "b.bin", iota(500, 30), 1000);
  std::vector<fs::path> paths{dir / "a.bin", dir / "b.bin"};
  TokenLoader original(paths, 2, 4, kVocab);
  for (int i = 0; i < 7; ++i) original.next();
  LoaderPosition saved = original.position();
  std::vector<std::vector<int32_t>> continued;
  for (int i = 0; i < 9; ++i) continued.push_back(values(original.next().inputs));

  TokenLoader resumed(paths, 2, 4, kVocab);
  resumed.seek(saved);
  EXPECT_EQ(resumed.position().shard, saved.shard);
  EXPECT_EQ(resumed.position().offset, saved.offset);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(values(resumed.next().inputs), continued[static_cast<size_t>(i)]);

  resumed.seek({});
  EXPECT_THAT(values(resumed.next().inputs), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(TokenLoader, ErrorsNameTheShard) {
  TempDir dir;
  write_token_shard(dir / "big.bin", iota(0, 100), 1000);
  write_token_shard(dir / "small.bin", iota(0, 12), 1000);
  std::string message = error_of([&] { TokenLoader loader({dir / "big.bin", dir / "small.bin"}, 3, 4, kVocab); });
  EXPECT_THAT(message, HasSubstr((dir / "small.bin").string()));
  EXPECT_THAT(message, HasSubstr("B=3"));
  EXPECT_THAT(message, HasSubstr("T=4"));
  EXPECT_THAT(message, HasSubstr("12 tokens"));

  TokenLoader loader({dir / "big.bin", dir / "small.bin"}, 1, 4, kVocab);
  message = error_of([&] { loader.seek({1, 13}); });
  EXPECT_THAT(message, HasSubstr((dir / "small.bin").string()));
  EXPECT_THAT(message, HasSubstr("offset 13"));
  EXPECT_THAT(error_of([&] { loader.seek({2, 0}); }), HasSubstr("shard 2"));

  std::string missing = (dir / "absent.bin").string();
  EXPECT_THAT(error_of([&] { TokenLoader loader({missing}, 1, 1, kVocab); }), HasSubstr(missing));
  EXPECT_THAT(error_of([&] { TokenLoader loader({}, 1, 1, kVocab); }), HasSubstr("no shard files"));
}

// A shard made for another tokenizer: the first token past the model's vocabulary is named with
// its shard and offset (the last target of a window too).
TEST(TokenLoader, ATokenOutsideTheVocabularyNamesTheShardAndOffset) {
  TempDir dir;
  std::vector<int32_t> tokens = iota(0, 20);
  tokens[12] = 900;
  write_token_shard(dir / "a.bin", tokens, 1000);
  TokenLoader loader({dir / "a.bin"}, 2, 3, 500);
  loader.next();  // inputs 0-5, targets 1-6
  std::string message = error_of([&] { loader.next(); });  // inputs 6-11, targets 7-12: the last one is bad
  EXPECT_THAT(message, HasSubstr("token shard '" + (dir / "a.bin").string() + "': token 900 at offset 12 is outside "
                                 "the model's vocabulary [0, 500) (model.vocab_size)"));
}

}  // namespace
}  // namespace strata
