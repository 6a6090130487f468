#include "data/token_shard.h"

#include <glob.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"

namespace strata {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "shards are little-endian and are copied as is");

namespace {

template <typename Token>
void write_tokens(AtomicFileWriter& writer, std::span<const int32_t> tokens) {
  constexpr size_t kBatch = 1 << 16;
  std::vector<Token> narrowed;
  narrowed.reserve(kBatch);
  for (size_t begin = 0; begin < tokens.size(); begin += kBatch) {
    size_t end = std::min(tokens.size(), begin + kBatch);
    narrowed.assign(tokens.begin() + static_cast<std::ptrdiff_t>(begin), tokens.begin() + static_cast<std::ptrdiff_t>(end));
    writer.write(narrowed.data(), narrowed.size() * sizeof(Token));
  }
}

template <typename Token>
void widen(const std::byte* source, int64_t count, int32_t* out) {
  const auto* tokens = reinterpret_cast<const Token*>(source);
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(tokens[i]);
}

}  // namespace

std::vector<fs::path> shard_files(const std::string& pattern, const std::string& key) {
  glob_t matches{};
  const int status = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
  std::vector<fs::path> files;
  for (size_t i = 0; status == 0 && i < matches.gl_pathc; ++i) files.emplace_back(matches.gl_pathv[i]);
  ::globfree(&matches);
  if (files.empty()) fail("key '{}': no token shard file matches '{}'", key, pattern);
  std::sort(files.begin(), files.end());
  return files;
}

void write_token_shard(const fs::path& path, std::span<const int32_t> tokens, int64_t vocab_size) {
  constexpr int64_t kMaxVocab = int64_t{1} << 31;  // ids are int32 in memory
  if (vocab_size <= 0 || vocab_size > kMaxVocab) {
    fail("cannot write token shard '{}': vocab_size {} is outside [1, {}]", path.string(), vocab_size, kMaxVocab);
  }
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail("cannot write token shard '{}': {} tokens exceed the format's int32 count", path.string(), tokens.size());
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      fail("cannot write token shard '{}': token {} at index {} is outside the vocabulary [0, {})", path.string(),
           tokens[i], i, vocab_size);
    }
  }
  const bool narrow = vocab_size <= 65536;  // ids up to 65535 fit in uint16
  int32_t header[kShardHeaderInts] = {};
  header[0] = narrow ? kShardMagic : kShardMagicLlama3;
  header[1] = narrow ? kShardVersionU16 : kShardVersionLlama3;
  header[2] = static_cast<int32_t>(tokens.size());
  AtomicFileWriter writer(path);
  writer.write(header, sizeof(header));
  if (narrow) {
    write_tokens<uint16_t>(writer, tokens);
  } else {
    write_tokens<uint32_t>(writer, tokens);
  }
  writer.commit();
}

TokenShard::TokenShard(const fs::path& path) : file_(path) {
  if (file_.size() < kShardHeaderBytes) {
    fail("token shard '{}' has {} bytes, fewer than the {}-byte header", path.string(), file_.size(),
         kShardHeaderBytes);
  }
  int32_t header[3];
  std::memcpy(header, file_.data(), sizeof(header));
  auto [magic, version, count] = header;
  if (magic == kShardMagic && version == kShardVersionU16) {
    token_bytes_ = 2;
  } else if ((magic == kShardMagic && version == kShardVersionU32) ||
             (magic == kShardMagicLlama3 && version == kShardVersionLlama3)) {
    token_bytes_ = 4;
  } else if (magic != kShardMagic && magic != kShardMagicLlama3) {
    fail("'{}' is not a token shard: magic number {} (expected {} or {})", path.string(), magic, kShardMagic,
         kShardMagicLlama3);
  } else {
    fail("token shard '{}' has unsupported version {} for magic {} (expected {} or {} with magic {}, {} with {})",
         path.string(), version, magic, kShardVersionU16, kShardVersionU32, kShardMagic, kShardVersionLlama3,
         kShardMagicLlama3);
  }
  if (count < 0) fail("token shard '{}' has a negative token count {}", path.string(), count);
  count_ = count;
  size_t expected = kShardHeaderBytes + static_cast<size_t>(count_) * token_bytes_;
  if (file_.size() != expected) {
    fail("token shard '{}' has {} bytes, but its header promises {} tokens of {} bytes: expected {} bytes",
         path.string(), file_.size(), count_, token_bytes_, expected);
  }
}

void TokenShard::read(int64_t begin, int64_t count, int32_t* out) const {
  STRATA_CHECK(begin >= 0 && count >= 0 && begin + count <= count_, "read [{}, {}) of {} tokens in '{}'", begin,
               begin + count, count_, path().string());
  const std::byte* source = file_.data() + kShardHeaderBytes + static_cast<size_t>(begin) * token_bytes_;
  if (token_bytes_ == 2) {
    widen<uint16_t>(source, count, out);
  } else {
    widen<uint32_t>(source, count, out);
  }
}

}  // namespace strata
