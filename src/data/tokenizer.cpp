#include "data/tokenizer.h"

#include <system_error>

#include "core/error.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace strata {

namespace fs = std::filesystem;

Tokenizer::Tokenizer(const fs::path& path) : Tokenizer(load_tokenizer(path)) {}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerBackend> backend)
    : backend_(std::move(backend)), path_(backend_->files().front()) {}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const { return backend_->encode(text); }

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const int32_t size = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= size) {
      fail("tokenizer '{}' cannot decode id {} at position {}: the vocabulary has {} tokens", path_.string(), ids[i],
           i, size);
    }
  }
  return backend_->decode(ids);
}

std::string Tokenizer::token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    fail("tokenizer '{}' has no token {}: the vocabulary has {} tokens", path_.string(), id, vocab_size());
  }
  return backend_->token(id);
}

Tokenizer load_tokenizer(const fs::path& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) {
    if (fs::exists(path / kHfTokenizerFile)) return Tokenizer(load_hf_tokenizer(path / kHfTokenizerFile));
    if (fs::exists(path / kSentencePieceFile)) return Tokenizer(load_sentencepiece(path / kSentencePieceFile));
    fail("directory '{}' holds no tokenizer: neither {} nor {}", path.string(), kHfTokenizerFile, kSentencePieceFile);
  }
  if (!fs::exists(path, error)) fail("tokenizer '{}' does not exist", path.string());
  if (path.extension() == ".json") return Tokenizer(load_hf_tokenizer(path));
  return Tokenizer(load_sentencepiece(path));
}

}  // namespace strata
