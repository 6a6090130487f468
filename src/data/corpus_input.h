#pragma once
// The documents of `strata data prepare`'s input files: plain text (a whole
// file is one document) or JSON Lines (one document per line, the string of
// one field), either of them possibly gzip- or zstd-compressed.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace strata {

struct CorpusInputOptions {
  std::string json_field = "text";  // the field of a JSON Lines record that holds its text
  bool skip_bad_lines = false;      // false: a bad JSON Lines record is an error naming the file and line
};

// The documents of all inputs, in order, as one text.
struct CorpusDocuments {
  std::string text;
  std::vector<size_t> ends;   // byte offset in `text` where each document ends, ascending
  int64_t skipped_lines = 0;  // bad JSON Lines records skipped (with skip_bad_lines)
};

// A file's bytes, decompressed when they are gzip or zstd data (by their magic bytes; a name ending in
// .gz or .zst whose bytes are neither is an error, as is corrupt or truncated data).
std::string read_maybe_compressed(const std::filesystem::path& file);

// Whether `file` holds JSON Lines: its name, less .gz or .zst, ends in .jsonl, .ndjson or .json.
bool is_json_lines(const std::filesystem::path& file);

// Reads every input. A plain text file is one document, a newline added when it does not end in one; a
// JSON Lines file gives one document per record with non-empty text (blank lines are not records). Missing
// and empty files are errors naming the file.
CorpusDocuments read_corpus_documents(const std::vector<std::filesystem::path>& inputs,
                                      const CorpusInputOptions& options);

}  // namespace strata
