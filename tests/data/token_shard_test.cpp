// llm.c token shards, built and inspected byte by byte here.
#include "data/token_shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>


#include "core/error.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

std::string le(uint64_t value, int bytes) {
  std::string out(static_cast<size_t>(bytes), '\0');
  for (int i = 0; i < bytes; ++i) out[static_cast<size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xffu);
  return out;
}

// A shard as llm.c's scripts write it: 256 int32 header, then the tokens.
std::string shard_bytes(int32_t magic, int32_t version, int32_t count, const std::vector<uint32_t>& tokens,
                        int token_bytes) {
  std::string bytes = le(static_cast<uint32_t>(magic), 4) + le(static_cast<uint32_t>(version), 4) +
                      le(static_cast<uint32_t>(count), 4) + std::string(253 * 4, '\0');
  for (uint32_t token : tokens) bytes += le(token, token_bytes);
  return bytes;
}

std::vector<int32_t> read_all(const TokenShard& shard) {
  std::vector<int32_t> tokens(static_cast<size_t>(shard.size()));
  shard.read(0, shard.size(), tokens.data());
  return tokens;
}

using testing::error_of;

TEST(TokenShard, ReadsLlmcGpt2Shards) {
  TempDir dir;
  write_bytes(dir / "v1.bin", shard_bytes(20240520, 1, 4, {50256, 0, 65535, 17}, 2));
  TokenShard shard(dir / "v1.bin");
  EXPECT_EQ(shard.size(), 4);
  EXPECT_EQ(shard.token_bytes(), 2u);
  EXPECT_EQ(read_all(shard), (std::vector<int32_t>{50256, 0, 65535, 17}));
  int32_t middle[2];
  shard.read(1, 2, middle);
  EXPECT_EQ(middle[0], 0);
  EXPECT_EQ(middle[1], 65535);
}

TEST(TokenShard, ReadsUint32Shards) {
  TempDir dir;
  // Version 2, which earlier Strata wrote.
  write_bytes(dir / "v2.bin", shard_bytes(20240520, 2, 3, {70000, 1, 128255}, 4));
  EXPECT_EQ(read_all(TokenShard(dir / "v2.bin")), (std::vector<int32_t>{70000, 1, 128255}));
  // llm.c's LLaMA-3 layout.
  write_bytes(dir / "llama3.bin", shard_bytes(20240801, 7, 2, {128000, 5}, 4));
  EXPECT_EQ(read_all(TokenShard(dir / "llama3.bin")), (std::vector<int32_t>{128000, 5}));
}

TEST(TokenShard, EmptyShardIsValid) {
  TempDir dir;
  write_bytes(dir / "empty.bin", shard_bytes(20240520, 1, 0, {}, 2));
  EXPECT_EQ(TokenShard(dir / "empty.bin").size(), 0);
}

TEST(TokenShard, WriterPicksLlmcFormatByVocabulary) {
  TempDir dir;
  std::vector<int32_t> tokens{0, 65535, 42};
  write_token_shard(dir / "narrow.bin", tokens, 65536);
  EXPECT_EQ(read_bytes(dir / "narrow.bin"), shard_bytes(20240520, 1, 3, {0, 65535, 42}, 2));

  // Past uint16: llm.c's uint32 layout (its LLaMA-3 shards), never the version 2 no llm.c tool reads.
  std::vector<int32_t> wide{65536, 3};
  write_token_shard(dir / "wide.bin", wide, 65537);
  EXPECT_EQ(read_bytes(dir / "wide.bin"), shard_bytes(20240801, 7, 2, {65536, 3}, 4));
  EXPECT_EQ(read_all(TokenShard(dir / "wide.bin")), wide);
  EXPECT_EQ(TokenShard(dir / "wide.bin").token_bytes(), 4u);

  std::vector<int32_t> llama3{128000, 128255, 0};
  write_token_shard(dir / "llama3.bin", llama3, 128256);
  EXPECT_EQ(read_bytes(dir / "llama3.bin"), shard_bytes(20240801, 7, 3, {128000, 128255, 0}, 4));
}

TEST(TokenShard, WriterRejectsTokensOutsideTheVocabulary) {
  TempDir dir;
  std::vector<int32_t> tokens{1, 300, 2};
  std::string message = error_of([&] { write_token_shard(dir / "bad.bin", tokens, 300); });
  EXPECT_THAT(message, HasSubstr((dir / "bad.bin").string()));
  EXPECT_THAT(message, HasSubstr("token 300 at index 1"));
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.bin"));
  std::vector<int32_t> negative{-1};
  EXPECT_THAT(error_of([&] { write_token_shard(dir / "bad.bin", negative, 300); }), HasSubstr("token -1"));
}

TEST(TokenShard, RejectsMalformedShardsNamingTheFile) {
  struct Case {
    const char* what;
    std::string bytes;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"shorter than the header", std::string(100, '\0'), {"100 bytes", "1024-byte header"}},
      {"wrong magic", shard_bytes(20240522, 1, 0, {}, 2), {"magic number 20240522"}},
      {"wrong version", shard_bytes(20240520, 3, 0, {}, 2), {"unsupported version 3"}},
      {"llama-3 magic with version 1", shard_bytes(20240801, 1, 0, {}, 2), {"unsupported version 1"}},
      {"negative count", shard_bytes(20240520, 1, -5, {}, 2), {"negative token count -5"}},
      {"truncated body", shard_bytes(20240520, 1, 4, {1, 2, 3}, 2),
       {"has 1030 bytes", "4 tokens of 2 bytes", "expected 1032 bytes"}},
      {"oversized body", shard_bytes(20240520, 1, 2, {1, 2, 3}, 2), {"has 1030 bytes", "expected 1028 bytes"}},
      {"uint32 body for a uint16 header", shard_bytes(20240520, 1, 2, {1, 2}, 4),
       {"has 1032 bytes", "expected 1028 bytes"}},
  };
  TempDir dir;
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.what);
    auto path = dir / "bad.bin";
    write_bytes(path, bad.bytes);
    std::string message = error_of([&] { TokenShard shard(path); });
    EXPECT_THAT(message, HasSubstr(path.string()));
    for (const auto& part : bad.parts) EXPECT_THAT(message, HasSubstr(part));
  }
  std::string missing = (dir / "absent.bin").string();
  EXPECT_THAT(error_of([&] { TokenShard shard(missing); }), HasSubstr(missing));
}

}  // namespace
}  // namespace strata
