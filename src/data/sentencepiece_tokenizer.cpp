#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/file_io.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// SentencePiece silently skips training sentences longer than its
// max_sentence_length (4192 bytes by default); longer lines are cut below it.
constexpr size_t kMaxSentenceBytes = 4096;

bool is_utf8_continuation(char byte) { return (static_cast<unsigned char>(byte) & 0xC0u) == 0x80u; }

// Feeds every non-empty line of the texts, in order, as a training sentence.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::span<const std::string_view> texts) : texts_(texts) { advance(); }

  bool done() const override { return text_index_ >= texts_.size(); }
  void Next() override { advance(); }
  const std::string& value() const override { return sentence_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  // Moves to the next sentence: the rest of the current line up to
  // kMaxSentenceBytes, cut at a character boundary.
  void advance() {
    while (text_index_ < texts_.size()) {
      std::string_view text = texts_[text_index_];
      if (position_ >= text.size()) {
        ++text_index_;
        position_ = 0;
        continue;
      }
      size_t line_end = text.find('\n', position_);
      if (line_end == std::string_view::npos) line_end = text.size();
      size_t end = line_end;
      if (end - position_ > kMaxSentenceBytes) {
        end = position_ + kMaxSentenceBytes;
        while (end > position_ + 1 && is_utf8_continuation(text[end])) --end;
      }
      std::string_view piece = text.substr(position_, end - position_);
      position_ = end == line_end ? line_end + 1 : end;
      if (!piece.empty()) {
        sentence_.assign(piece);
        return;
      }
    }
  }

  std::span<const std::string_view> texts_;
  size_t text_index_ = 0;
  size_t position_ = 0;
  std::string sentence_;
};

// A loaded SentencePiece model.
class SentencePieceTokenizer : public TokenizerBackend {
 public:
  explicit SentencePieceTokenizer(const fs::path& model_file) : path_(model_file) {
    if (!fs::exists(model_file)) fail("tokenizer model '{}' does not exist", model_file.string());
    auto status = processor_.Load(model_file.string());
    if (!status.ok()) fail("cannot load tokenizer model '{}': {}", model_file.string(), status.message());
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    auto status = processor_.Encode(text, &ids);
    if (!status.ok()) fail("tokenizer '{}' cannot encode text: {}", path_.string(), status.message());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    auto status = processor_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!status.ok()) fail("tokenizer '{}' cannot decode: {}", path_.string(), status.message());
    return text;
  }

  int32_t vocab_size() const override { return processor_.GetPieceSize(); }
  int32_t bos_id() const override { return processor_.bos_id(); }
  int32_t eos_id() const override { return processor_.eos_id(); }
  int32_t unk_id() const override { return processor_.unk_id(); }
  int32_t pad_id() const override { return processor_.pad_id(); }
  std::string token(int32_t id) const override { return processor_.IdToPiece(id); }
  std::string_view format() const override { return "sentencepiece"; }
  std::vector<fs::path> files() const override { return {path_}; }

 private:
  fs::path path_;
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<TokenizerBackend> load_sentencepiece(const fs::path& model_file) {
  return std::make_unique<SentencePieceTokenizer>(model_file);
}

Tokenizer train_tokenizer(std::span<const std::string_view> texts, const fs::path& model_file, int vocab_size,
                          std::string_view corpus_name) {
  if (vocab_size <= 0) fail("cannot train a tokenizer on {}: vocab_size {} must be positive", corpus_name, vocab_size);
  LineIterator sentences(texts);
  if (sentences.done()) fail("cannot train a tokenizer on {}: it holds no text", corpus_name);
  const std::unordered_map<std::string, std::string> options = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"user_defined_symbols", "\n"},
      {"input_sentence_size", "0"},  // every sentence, so no sampling
      {"shuffle_input_sentence", "false"},
      {"num_threads", "1"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes + 96)},
      {"minloglevel", "2"},  // errors come back as a status; its progress log is noise here
  };
  std::string model;
  auto status = sentencepiece::SentencePieceTrainer::Train(options, &sentences, &model);
  if (!status.ok()) {
    fail("cannot train a tokenizer with vocab_size {} on {}: {}", vocab_size, corpus_name, status.message());
  }
  write_file_atomic(model_file, model);
  return Tokenizer(load_sentencepiece(model_file));
}

Tokenizer train_tokenizer(std::span<const fs::path> text_files, const fs::path& model_file, int vocab_size) {
  if (text_files.empty()) fail("cannot train a tokenizer: no text files given");
  std::vector<std::string> texts;
  for (const fs::path& file : text_files) {
    texts.push_back(read_text_file(file));
    if (texts.back().empty()) fail("cannot train a tokenizer: text file '{}' is empty", file.string());
  }
  std::vector<std::string_view> views(texts.begin(), texts.end());
  std::vector<std::string> names(text_files.begin(), text_files.end());
  return train_tokenizer(views, model_file, vocab_size, fmt::format("'{}'", fmt::join(names, "', '")));
}

}  // namespace strata
