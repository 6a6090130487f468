#pragma once
// llm.c token shards: a header of 256 little-endian int32 (magic, version,
// token count, zeros) followed by the tokens. llm.c writes two formats
// (dev/data/data_common.py): magic 20240520 version 1 with uint16 tokens
// (GPT-2) and magic 20240801 version 7 with uint32 tokens (LLaMA 3); both are
// written and read here. Version 2 of magic 20240520 (uint32 tokens), which
// earlier Strata wrote and no llm.c tool reads, is still read.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace strata {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardMagicLlama3 = 20240801;
inline constexpr int32_t kShardVersionU16 = 1;
inline constexpr int32_t kShardVersionU32 = 2;  // read only
inline constexpr int32_t kShardVersionLlama3 = 7;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

// Writes `tokens` atomically: llm.c's uint16 format (20240520, 1) when every
// id fits, i.e. vocab_size <= 65536, else its uint32 format (20240801, 7).
// Every token must lie in [0, vocab_size).
void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens, int64_t vocab_size);

// The shard files a path or glob pattern names (sorted, as llm.c's scripts
// number them), or an error naming `key` and the pattern when none exists.
std::vector<std::filesystem::path> shard_files(const std::string& pattern, const std::string& key);

// A memory-mapped shard, validated when opened.
class TokenShard {
 public:
  explicit TokenShard(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_.path(); }
  int64_t size() const { return count_; }  // tokens
  size_t token_bytes() const { return token_bytes_; }

  // Copies tokens [begin, begin + count) into `out`.
  void read(int64_t begin, int64_t count, int32_t* out) const;

 private:
  MappedFile file_;
  int64_t count_ = 0;
  size_t token_bytes_ = 2;
};

}  // namespace strata
