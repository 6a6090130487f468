#pragma once
// One tokenizer whatever file backs it: a SentencePiece model (tokenizer.model:
// LLaMA 2, TinyLlama, and the ones `strata data prepare` trains, see
// sentencepiece_tokenizer.h) or a HuggingFace tokenizer.json (GPT-2, SmolLM,
// LLaMA 3, Qwen2, LLaMA 2, Mistral, T5; see hf_tokenizer.h). Encoding adds
// no bos/eos (nor a post-processor's tokens); decoding keeps a tokenizer.json's
// special tokens (SentencePiece's drops control tokens such as </s>).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// What a tokenizer file format implements; Tokenizer holds one.
class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Every id lies in [0, vocab_size()); one the vocabulary lacks (a gap) fails.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int32_t vocab_size() const = 0;  // one past the highest id
  virtual int32_t bos_id() const = 0;      // -1 when the files do not say
  virtual int32_t eos_id() const = 0;
  virtual int32_t unk_id() const = 0;
  virtual int32_t pad_id() const = 0;
  // The token `id` as the vocabulary spells it (a special token's own text, which decode may drop).
  virtual std::string token(int32_t id) const = 0;
  virtual std::string_view format() const = 0;  // "sentencepiece" or "huggingface"
  // Every file read, the main one first: copying them elsewhere copies the tokenizer.
  virtual std::vector<std::filesystem::path> files() const = 0;
};

class Tokenizer {
 public:
  // Loads what `path` names, as load_tokenizer does.
  explicit Tokenizer(const std::filesystem::path& path);
  explicit Tokenizer(std::unique_ptr<TokenizerBackend> backend);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;  // fails on an id outside the vocabulary

  int32_t vocab_size() const { return backend_->vocab_size(); }
  int32_t bos_id() const { return backend_->bos_id(); }
  int32_t eos_id() const { return backend_->eos_id(); }
  int32_t unk_id() const { return backend_->unk_id(); }
  int32_t pad_id() const { return backend_->pad_id(); }
  std::string token(int32_t id) const;  // fails on an id outside the vocabulary
  std::string_view format() const { return backend_->format(); }
  std::vector<std::filesystem::path> files() const { return backend_->files(); }
  // The main file: tokenizer.model or tokenizer.json.
  const std::filesystem::path& path() const { return path_; }

 private:
  std::unique_ptr<TokenizerBackend> backend_;
  std::filesystem::path path_;
};

// The tokenizer of a model directory (its tokenizer.json when it has one, as
// transformers' fast tokenizers prefer it, else its tokenizer.model) or of a
// file: `.json` is read as a HuggingFace tokenizer.json, anything else as a
// SentencePiece model.
Tokenizer load_tokenizer(const std::filesystem::path& path);

}  // namespace strata
