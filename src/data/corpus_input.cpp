#include "data/corpus_input.h"

#include <algorithm>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "data/compressed_file.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The file's name less a compression suffix.
fs::path uncompressed_name(const fs::path& file) {
  const fs::path extension = file.extension();
  return extension == ".gz" || extension == ".zst" ? file.filename().stem() : file.filename();
}

// What is wrong with one JSON Lines record, or nothing; `text` gets the record's text.
std::string read_record(std::string_view line, const std::string& field, std::string& text) {
  const json record = json::parse(line, nullptr, false);
  if (record.is_discarded()) return "is not valid JSON";
  if (!record.is_object()) return fmt::format("is {}, not a JSON object", json_excerpt(record));
  const auto found = record.find(field);
  if (found == record.end()) return fmt::format("has no \"{}\" field", field);
  if (!found->is_string()) return fmt::format("has \"{}\": {}, not a string", field, json_excerpt(*found));
  text = found->get<std::string>();
  return {};
}

void read_json_lines(std::string_view content, const fs::path& file, const CorpusInputOptions& options,
                     CorpusDocuments& documents) {
  size_t line_number = 0;
  for (size_t start = 0; start < content.size();) {
    size_t end = content.find('\n', start);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // a blank line is no record
    std::string text;
    const std::string problem = read_record(line, options.json_field, text);
    if (!problem.empty()) {
      if (!options.skip_bad_lines) {
        fail("'{}' line {}: the record {} (pass --skip-bad-lines to skip such lines)", file.string(), line_number,
             problem);
      }
      ++documents.skipped_lines;
      continue;
    }
    if (text.empty()) continue;
    documents.text += text;
    documents.ends.push_back(documents.text.size());
  }
}

}  // namespace

std::string read_maybe_compressed(const fs::path& file) {
  const std::string bytes = read_text_file(file);
  const std::string where = fmt::format("'{}'", file.string());
  if (is_gzip(bytes)) return gunzip(bytes, where);
  if (is_zstd(bytes)) return unzstd(bytes, where);
  const fs::path extension = file.extension();
  if (extension == ".gz" || extension == ".zst") {
    fail("'{}' is named {} but does not start as {} data does", file.string(), extension.string(),
         extension == ".gz" ? "gzip" : "zstd");
  }
  return bytes;
}

bool is_json_lines(const fs::path& file) {
  const fs::path extension = uncompressed_name(file).extension();
  return extension == ".jsonl" || extension == ".ndjson" || extension == ".json";
}

CorpusDocuments read_corpus_documents(const std::vector<fs::path>& inputs, const CorpusInputOptions& options) {
  if (inputs.empty()) fail("cannot prepare a corpus: no input files given");
  CorpusDocuments documents;
  for (const fs::path& input : inputs) {
    if (!fs::exists(input)) fail("corpus file '{}' does not exist", input.string());
    const std::string content = read_maybe_compressed(input);
    if (content.empty()) fail("corpus file '{}' is empty", input.string());
    const size_t before = documents.ends.size();
    if (is_json_lines(input)) {
      read_json_lines(content, input, options, documents);
      if (documents.ends.size() == before) fail("corpus file '{}' holds no record with text", input.string());
      continue;
    }
    documents.text += content;
    if (documents.text.back() != '\n') documents.text += '\n';
    documents.ends.push_back(documents.text.size());
  }
  return documents;
}

}  // namespace strata
