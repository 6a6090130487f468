#pragma once
// A byte-level BPE tokenizer backed by SentencePiece. Models trained here
// encode any UTF-8 text (unseen characters fall back to byte tokens), keep
// whitespace and newlines exactly (identity normalisation, no dummy prefix,
// "\n" is a token of its own), and decode back to the input text. The one
// exception is U+2581 ('▁'), SentencePiece's internal space marker, which
// decodes to a space.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace strata {

class Tokenizer {
 public:
  explicit Tokenizer(const std::filesystem::path& model_file);  // a SentencePiece .model
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;  // fails on an id outside the vocabulary

  int32_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

// Trains on `texts` (one or more documents; each line is a training
// sentence) and writes the model to `model_file` atomically. Training is
// deterministic: every line is used, in order, on one thread. `corpus_name`
// names the text in errors.
Tokenizer train_tokenizer(std::span<const std::string_view> texts, const std::filesystem::path& model_file,
                          int vocab_size, std::string_view corpus_name);

// The same, reading the text files given.
Tokenizer train_tokenizer(std::span<const std::filesystem::path> text_files, const std::filesystem::path& model_file,
                          int vocab_size);

}  // namespace strata
