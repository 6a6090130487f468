#pragma once
// Turns documents (plain text or JSON Lines files, possibly gzip or zstd
// compressed: corpus_input.h) into a training corpus directory: the tokenizer
// (trained here as tokenizer.model, or a copy of the one given),
// train_NNN.bin / val_NNN.bin token shards with the tokenizer's end-of-text
// token after every document, and meta.json (written last, so a directory
// with meta.json is complete). The split rule is in data/README.md.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "data/corpus_input.h"

namespace strata {

inline constexpr std::string_view kCorpusMetaFile = "meta.json";
inline constexpr std::string_view kCorpusTokenizerFile = "tokenizer.model";  // the one trained here

struct CorpusOptions {
  double val_fraction = 0.05;          // every round(1/val_fraction)-th chunk is validation
  int64_t shard_tokens = 100'000'000;  // most tokens per shard file
  size_t max_chunk_bytes = 64 * 1024;  // chunks are smaller for small corpora (see README)
  CorpusInputOptions input;            // JSON Lines: the text's field, bad lines skipped or an error
};

struct CorpusMeta {
  std::filesystem::path dir;
  std::filesystem::path tokenizer;
  int64_t vocab_size = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t documents = 0;       // plain text files and JSON Lines records read
  int64_t skipped_lines = 0;   // bad JSON Lines records skipped
  int32_t document_end_id = -1;  // the token after every document (the tokenizer's eos), -1: none
  std::vector<std::filesystem::path> train_shards;
  std::vector<std::filesystem::path> val_shards;
  // Entropy of the train tokens' unigram distribution, in nats per token.
  double train_unigram_entropy = 0;
  // Cross-entropy of the val tokens under the train unigram distribution with
  // add-one smoothing, in nats per token: the loss a model must beat.
  double val_unigram_cross_entropy = 0;
};

// Trains a SentencePiece tokenizer of `vocab_size` tokens on the training text.
CorpusMeta prepare_corpus(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out_dir,
                          int vocab_size, const CorpusOptions& options = {});

// Encodes with the tokenizer `tokenizer` names (a model directory or a file,
// as load_tokenizer reads it) instead; its files are copied into `out_dir`
// (tokenizer.json and tokenizer_config.json, or tokenizer.model), so the
// corpus stands on its own, and meta.json records where they came from.
CorpusMeta prepare_corpus(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out_dir,
                          const std::filesystem::path& tokenizer, const CorpusOptions& options = {});

CorpusMeta read_corpus_meta(const std::filesystem::path& dir);

}  // namespace strata
