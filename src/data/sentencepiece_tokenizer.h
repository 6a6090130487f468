#pragma once
// SentencePiece tokenizers: any .model file (LLaMA 2 and TinyLlama ship one),
// and the byte-level BPE models trained here for `strata data prepare`. Those
// encode any UTF-8 text (unseen characters fall back to byte tokens), keep
// whitespace and newlines exactly (identity normalisation, no dummy prefix,
// "\n" is a token of its own), and decode back to the input text. The one
// exception is U+2581 ('▁'), SentencePiece's internal space marker, which
// decodes to a space.
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>

#include "data/tokenizer.h"

namespace strata {

inline constexpr std::string_view kSentencePieceFile = "tokenizer.model";  // its name in a model directory

std::unique_ptr<TokenizerBackend> load_sentencepiece(const std::filesystem::path& model_file);

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
