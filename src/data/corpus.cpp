#include "data/corpus.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "data/corpus_input.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr std::string_view kCorpusFormat = "strata-corpus";
constexpr int kCorpusVersion = 1;
// Small corpora get smaller chunks so that validation still draws on about
// this many places spread over the text.
constexpr size_t kMinValidationChunks = 10;

struct Split {
  std::vector<std::string_view> train;
  std::vector<std::string_view> val;
  size_t chunk_bytes = 0;
};

// Cuts the text into consecutive chunks, each closed at the first line or document end once it holds
// chunk_bytes, and sends every k-th chunk to validation.
Split split_text(const CorpusDocuments& documents, size_t every_kth, size_t max_chunk_bytes) {
  const std::string_view text = documents.text;
  Split split;
  size_t target = (text.size() + kMinValidationChunks * every_kth - 1) / (kMinValidationChunks * every_kth);
  split.chunk_bytes = std::clamp<size_t>(target, 1, max_chunk_bytes);
  size_t chunk_index = 0;
  auto emit = [&](std::string_view chunk) {
    (chunk_index % every_kth == every_kth - 1 ? split.val : split.train).push_back(chunk);
    ++chunk_index;
  };
  size_t start = 0;
  size_t position = 0;
  auto next_end = documents.ends.begin();
  while (position < text.size()) {
    while (next_end != documents.ends.end() && *next_end <= position) ++next_end;
    const size_t newline = text.find('\n', position);
    position = std::min(newline == std::string_view::npos ? text.size() : newline + 1,
                        next_end == documents.ends.end() ? text.size() : *next_end);
    if (position - start >= split.chunk_bytes) {
      emit(text.substr(start, position - start));
      start = position;
    }
  }
  if (start < text.size()) emit(text.substr(start));
  return split;
}

// A chunk's text between document ends, and whether a document ends after it.
struct Segment {
  std::string_view text;
  bool document_end = false;
};

std::vector<Segment> segments_of(std::string_view chunk, const CorpusDocuments& documents) {
  const size_t begin = static_cast<size_t>(chunk.data() - documents.text.data());
  const size_t end = begin + chunk.size();
  std::vector<Segment> segments;
  size_t start = begin;
  for (auto it = std::upper_bound(documents.ends.begin(), documents.ends.end(), begin);
       it != documents.ends.end() && *it <= end; ++it) {
    segments.push_back({chunk.substr(start - begin, *it - start), true});
    start = *it;
  }
  if (start < end) segments.push_back({chunk.substr(start - begin), false});
  return segments;
}

// The chunks' text split at document ends: what the tokenizer is trained on.
std::vector<std::string_view> document_pieces(const std::vector<std::string_view>& chunks,
                                              const CorpusDocuments& documents) {
  std::vector<std::string_view> pieces;
  for (std::string_view chunk : chunks) {
    for (const Segment& segment : segments_of(chunk, documents)) pieces.push_back(segment.text);
  }
  return pieces;
}

// Each chunk encoded on its own, a document's text apart from the next, `end_token` after each document
// that ends (none when it is negative).
std::vector<int32_t> encode_chunks(const Tokenizer& tokenizer, const std::vector<std::string_view>& chunks,
                                   const CorpusDocuments& documents, int32_t end_token) {
  std::vector<int32_t> tokens;
  for (std::string_view chunk : chunks) {
    for (const Segment& segment : segments_of(chunk, documents)) {
      std::vector<int32_t> encoded = tokenizer.encode(segment.text);
      tokens.insert(tokens.end(), encoded.begin(), encoded.end());
      if (segment.document_end && end_token >= 0) tokens.push_back(end_token);
    }
  }
  return tokens;
}

// Splits tokens into ceil(count / shard_tokens) files of near-equal size, so
// no shard is a tiny remainder.
std::vector<std::string> write_shards(const fs::path& out_dir, std::string_view prefix,
                                      const std::vector<int32_t>& tokens, int64_t shard_tokens, int64_t vocab_size) {
  const size_t count = tokens.size();
  const size_t shards = std::max<size_t>(1, (count + static_cast<size_t>(shard_tokens) - 1) /
                                                static_cast<size_t>(shard_tokens));
  std::vector<std::string> names;
  size_t begin = 0;
  for (size_t i = 0; i < shards; ++i) {
    size_t size = count / shards + (i < count % shards ? 1 : 0);
    names.push_back(fmt::format("{}_{:03d}.bin", prefix, i));
    write_token_shard(out_dir / names.back(), std::span(tokens).subspan(begin, size), vocab_size);
    begin += size;
  }
  return names;
}

std::vector<int64_t> unigram_counts(const std::vector<int32_t>& tokens, int64_t vocab_size) {
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size), 0);
  for (int32_t token : tokens) ++counts[static_cast<size_t>(token)];
  return counts;
}

double entropy_nats(const std::vector<int64_t>& counts, int64_t total) {
  double entropy = 0;
  for (int64_t count : counts) {
    if (count == 0) continue;
    double p = static_cast<double>(count) / static_cast<double>(total);
    entropy -= p * std::log(p);
  }
  return entropy;
}

// Mean of -ln q(t) over `tokens`, q being the add-one smoothed unigram
// distribution of `counts`.
double smoothed_cross_entropy_nats(const std::vector<int32_t>& tokens, const std::vector<int64_t>& counts,
                                   int64_t total) {
  const double denominator = static_cast<double>(total + static_cast<int64_t>(counts.size()));
  double sum = 0;
  for (int32_t token : tokens) {
    sum -= std::log(static_cast<double>(counts[static_cast<size_t>(token)] + 1) / denominator);
  }
  return sum / static_cast<double>(tokens.size());
}

// Every tokenizer file a corpus directory may hold. Each is replaced or
// removed, so that none is left from an earlier preparation with another
// tokenizer (load_tokenizer would prefer a stale tokenizer.json).
constexpr std::array<std::string_view, 3> kTokenizerFiles = {kSentencePieceFile, kHfTokenizerFile,
                                                             kHfTokenizerConfigFile};

// The name a file of `tokenizer` takes in the corpus directory: the main
// file the name its format has in a model directory, the others their own.
std::string corpus_file_name(const Tokenizer& tokenizer, const fs::path& file) {
  if (file != tokenizer.path()) return file.filename().string();
  return std::string(tokenizer.format() == "huggingface" ? kHfTokenizerFile : kSentencePieceFile);
}

void remove_stale_tokenizer_files(const fs::path& out_dir, const std::vector<fs::path>& keep) {
  for (std::string_view name : kTokenizerFiles) {
    const fs::path file = out_dir / name;
    if (std::find(keep.begin(), keep.end(), file) != keep.end()) continue;
    std::error_code error;
    fs::remove(file, error);
    if (error) fail("cannot remove the old '{}': {}", file.string(), error.message());
  }
}

// Copies the files of `source` into out_dir and returns the tokenizer they make there.
Tokenizer copy_tokenizer(const Tokenizer& source, const fs::path& out_dir) {
  std::vector<fs::path> targets;
  for (const fs::path& file : source.files()) targets.push_back(out_dir / corpus_file_name(source, file));
  remove_stale_tokenizer_files(out_dir, targets);
  const std::vector<fs::path> files = source.files();
  for (size_t i = 0; i < files.size(); ++i) {
    std::error_code error;
    if (fs::exists(targets[i]) && fs::equivalent(files[i], targets[i], error)) continue;  // out_dir is the source
    write_file_atomic(targets[i], read_text_file(files[i]));
  }
  return load_tokenizer(targets.front());
}

// The tokenizer a corpus is encoded with: one trained here, of vocab_size
// tokens, or a copy of the one `given` names.
struct TokenizerChoice {
  int vocab_size = 0;
  const fs::path* given = nullptr;
};

void check_options(const fs::path& out_dir, const CorpusOptions& options) {
  if (!(options.val_fraction > 0 && options.val_fraction <= 0.5)) {
    fail("cannot prepare corpus '{}': val_fraction {} must be in (0, 0.5]", out_dir.string(), options.val_fraction);
  }
  if (options.shard_tokens <= 0 || options.max_chunk_bytes == 0) {
    fail("cannot prepare corpus '{}': shard_tokens ({}) and max_chunk_bytes ({}) must be positive", out_dir.string(),
         options.shard_tokens, options.max_chunk_bytes);
  }
}

// Creates out_dir, or readies an existing one: until the new meta.json lands, it must not pass for a
// complete corpus.
void start_directory(const fs::path& out_dir) {
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) fail("cannot create corpus directory '{}': {}", out_dir.string(), error.message());
  fs::remove(out_dir / kCorpusMetaFile, error);
  if (error) fail("cannot remove the old '{}': {}", (out_dir / kCorpusMetaFile).string(), error.message());
}

// The token streams, shards and baselines of both splits, into `meta`; returns the shard names.
std::pair<std::vector<std::string>, std::vector<std::string>> write_splits(const Tokenizer& tokenizer,
                                                                           const Split& split,
                                                                           const CorpusDocuments& documents,
                                                                           const CorpusOptions& options,
                                                                           CorpusMeta& meta) {
  const int64_t vocab = tokenizer.vocab_size();
  const std::vector<int32_t> train_tokens = encode_chunks(tokenizer, split.train, documents, tokenizer.eos_id());
  const std::vector<int32_t> val_tokens = encode_chunks(tokenizer, split.val, documents, tokenizer.eos_id());
  meta.vocab_size = vocab;
  meta.train_tokens = static_cast<int64_t>(train_tokens.size());
  meta.val_tokens = static_cast<int64_t>(val_tokens.size());
  std::vector<int64_t> counts = unigram_counts(train_tokens, vocab);
  meta.train_unigram_entropy = entropy_nats(counts, meta.train_tokens);
  meta.val_unigram_cross_entropy = smoothed_cross_entropy_nats(val_tokens, counts, meta.train_tokens);
  auto names = std::make_pair(write_shards(meta.dir, "train", train_tokens, options.shard_tokens, vocab),
                              write_shards(meta.dir, "val", val_tokens, options.shard_tokens, vocab));
  for (const auto& name : names.first) meta.train_shards.push_back(meta.dir / name);
  for (const auto& name : names.second) meta.val_shards.push_back(meta.dir / name);
  return names;
}

CorpusMeta prepare(const std::vector<fs::path>& inputs, const fs::path& out_dir, const TokenizerChoice& choice,
                   const CorpusOptions& options) {
  check_options(out_dir, options);
  std::vector<std::string> input_names(inputs.begin(), inputs.end());
  const std::string corpus_name = fmt::format("'{}'", fmt::join(input_names, "', '"));

  const CorpusDocuments documents = read_corpus_documents(inputs, options.input);
  const size_t every_kth = static_cast<size_t>(std::lround(1.0 / options.val_fraction));
  Split split = split_text(documents, every_kth, options.max_chunk_bytes);
  if (split.val.empty()) {
    fail("corpus {} is too small to split: it makes {} chunk(s) of whole lines, and validation takes every {}-th",
         corpus_name, split.train.size(), every_kth);
  }

  // Loaded before anything is written, so that a bad tokenizer leaves the directory as it was.
  std::optional<Tokenizer> given;
  if (choice.given != nullptr) given.emplace(load_tokenizer(*choice.given));
  start_directory(out_dir);
  const Tokenizer tokenizer = [&] {
    if (given) return copy_tokenizer(*given, out_dir);
    remove_stale_tokenizer_files(out_dir, {out_dir / kCorpusTokenizerFile});
    return train_tokenizer(document_pieces(split.train, documents), out_dir / kCorpusTokenizerFile, choice.vocab_size,
                           corpus_name);
  }();

  CorpusMeta meta;
  meta.dir = out_dir;
  meta.tokenizer = tokenizer.path();
  meta.documents = static_cast<int64_t>(documents.ends.size());
  meta.skipped_lines = documents.skipped_lines;
  meta.document_end_id = tokenizer.eos_id();
  const auto [train_names, val_names] = write_splits(tokenizer, split, documents, options, meta);

  std::vector<std::string> input_paths;
  for (const fs::path& input : inputs) input_paths.push_back(fs::absolute(input).string());
  json document = {
      {"format", std::string(kCorpusFormat)},
      {"version", kCorpusVersion},
      {"tokenizer", tokenizer.path().filename().string()},
      {"tokenizer_format", std::string(tokenizer.format())},
      {"vocab_size", meta.vocab_size},
      {"train_tokens", meta.train_tokens},
      {"val_tokens", meta.val_tokens},
      {"train_shards", train_names},
      {"val_shards", val_names},
      {"train_unigram_entropy_nats", meta.train_unigram_entropy},
      {"val_unigram_cross_entropy_nats", meta.val_unigram_cross_entropy},
      {"val_fraction", options.val_fraction},
      {"chunk_bytes", split.chunk_bytes},
      {"train_chunks", split.train.size()},
      {"val_chunks", split.val.size()},
      {"text_bytes", documents.text.size()},
      {"documents", meta.documents},
      {"document_end_token", meta.document_end_id >= 0 ? json(meta.document_end_id) : json(nullptr)},
      {"skipped_lines", meta.skipped_lines},
      {"inputs", input_paths},
  };
  if (choice.given != nullptr) document["tokenizer_source"] = fs::absolute(*choice.given).string();
  write_file_atomic(out_dir / kCorpusMetaFile, document.dump(2) + "\n");
  return meta;
}

}  // namespace

CorpusMeta prepare_corpus(const std::vector<fs::path>& inputs, const fs::path& out_dir, int vocab_size,
                          const CorpusOptions& options) {
  return prepare(inputs, out_dir, TokenizerChoice{vocab_size, nullptr}, options);
}

CorpusMeta prepare_corpus(const std::vector<fs::path>& inputs, const fs::path& out_dir, const fs::path& tokenizer,
                          const CorpusOptions& options) {
  return prepare(inputs, out_dir, TokenizerChoice{0, &tokenizer}, options);
}

namespace {

// meta.json's value of `key` as T, or an error naming the file, the key and what it holds instead.
template <typename T>
T meta_field(const json& document, const char* key, const fs::path& path) {
  if (!document.contains(key)) fail("'{}': key \"{}\" is missing", path.string(), key);
  const json& value = document.at(key);
  // An integer past int64's range arrives as a double or an unsigned: converting it would be undefined.
  bool convertible = true;
  if constexpr (std::is_same_v<T, int64_t>) {
    convertible = value.is_number_integer() &&
                  !(value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX));
  }
  if (convertible) {
    try {
      return value.get<T>();
    } catch (const json::exception&) {
    }
  }
  const char* expected = std::is_same_v<T, std::string> ? "a string"
                         : std::is_same_v<T, double>    ? "a number"
                         : std::is_same_v<T, int64_t>   ? "an integer"
                                                        : "a list of file names";
  fail("'{}': key \"{}\" is {}, expected {}", path.string(), key, json_excerpt(value), expected);
}

}  // namespace

CorpusMeta read_corpus_meta(const fs::path& dir) {
  const fs::path path = dir / kCorpusMetaFile;
  if (!fs::exists(path)) fail("'{}' is not a prepared corpus: '{}' does not exist", dir.string(), path.string());
  json document = read_json_file(path);
  auto bad = [&](std::string_view what) { fail("'{}': {}", path.string(), what); };
  // Compared as JSON: a value of another type is a mismatch, not a type error.
  if (!document.is_object() || !document.contains("format") || document["format"] != kCorpusFormat) {
    bad(fmt::format("not a corpus description (\"format\" is not \"{}\")", kCorpusFormat));
  }
  if (!document.contains("version") || document["version"] != kCorpusVersion) {
    bad(fmt::format("unsupported \"version\" (this build reads version {})", kCorpusVersion));
  }
  CorpusMeta meta;
  meta.dir = dir;
  meta.tokenizer = dir / meta_field<std::string>(document, "tokenizer", path);
  meta.vocab_size = meta_field<int64_t>(document, "vocab_size", path);
  meta.train_tokens = meta_field<int64_t>(document, "train_tokens", path);
  meta.val_tokens = meta_field<int64_t>(document, "val_tokens", path);
  for (const auto& name : meta_field<std::vector<std::string>>(document, "train_shards", path)) {
    meta.train_shards.push_back(dir / name);
  }
  for (const auto& name : meta_field<std::vector<std::string>>(document, "val_shards", path)) {
    meta.val_shards.push_back(dir / name);
  }
  meta.train_unigram_entropy = meta_field<double>(document, "train_unigram_entropy_nats", path);
  meta.val_unigram_cross_entropy = meta_field<double>(document, "val_unigram_cross_entropy_nats", path);
  if (meta.train_shards.empty() || meta.val_shards.empty()) bad("lists no train or no val shards");
  return meta;
}

}  // namespace strata
