// strata data prepare's inputs: JSON Lines records (errors naming the file
// and line, skipped lines counted, the field chosen), gzip and zstd data made
// here with zlib and libzstd read back as the text they hold, and document
// boundaries in the token shards (the tokenizer's eos after every document).
#include "data/corpus_input.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>

#include <fmt/format.h>

#include "data/corpus.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

std::string gzip(std::string_view text) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);  // 15 + 16: gzip
  std::string out(deflateBound(&stream, text.size()) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string zstd(std::string_view text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t size = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  EXPECT_FALSE(ZSTD_isError(size));
  out.resize(size);
  return out;
}

// Documents of words with no line breaks, the same every run.
std::vector<std::string> documents(size_t count) {
  const char* words[] = {"the", "king", "said", "to", "his", "queen", "and", "her", "lord", "of", "night", "day"};
  std::vector<std::string> out;
  uint32_t seed = 99;
  for (size_t d = 0; d < count; ++d) {
    std::string text = "Document " + std::to_string(d) + ":";
    for (int w = 0; w < 40; ++w) {
      seed = seed * 1664525u + 1013904223u;
      text += std::string(" ") + words[(seed >> 10) % 12];
    }
    out.push_back(text + ".");
  }
  return out;
}

std::string json_lines(const std::vector<std::string>& texts, const std::string& field = "text") {
  std::string out;
  for (const std::string& text : texts) out += R"({"id": 1, ")" + field + R"(": ")" + text + "\"}\n";
  return out;
}

TEST(CorpusInput, ABadJsonLineIsAnErrorNamingTheFileAndLine) {
  TempDir dir;
  const std::pair<std::string, std::string> bad_lines[] = {
      {R"({"text": 5})", R"(has "text": 5, not a string)"},
      {R"({"text": "unterminated)", "is not valid JSON"},
      {R"(["text", "a list"])", "not a JSON object"},
      {R"({"content": "other field"})", R"(has no "text" field)"},
  };
  for (const auto& [line, problem] : bad_lines) {
    write_bytes(dir / "data.jsonl", fmt::format("{{\"text\": \"first\"}}\n\n{}\n{{\"text\": \"last\"}}\n", line));
    const std::string message = error_of([&] { read_corpus_documents({dir / "data.jsonl"}, {}); });
    EXPECT_THAT(message, HasSubstr(fmt::format("'{}' line 3", (dir / "data.jsonl").string())));  // the blank line counts
    EXPECT_THAT(message, HasSubstr(problem));
    EXPECT_THAT(message, HasSubstr("--skip-bad-lines"));
  }
}

TEST(CorpusInput, SkipsAndCountsBadLinesAndReadsTheFieldGiven) {
  TempDir dir;
  write_bytes(dir / "data.jsonl", "{\"body\": \"one\"}\nnot json\n\r\n{\"body\": 2}\n{\"body\": \"\"}\n"
                                  "{\"body\": \"two\\nlines\", \"text\": \"ignored\"}\r\n{}\n{\"body\": \"three\"}");
  const CorpusDocuments read = read_corpus_documents({dir / "data.jsonl"}, {"body", true});
  EXPECT_EQ(read.skipped_lines, 3);  // "not json", a number, {}; the blank line and the empty text are no documents
  EXPECT_EQ(read.text, "onetwo\nlinesthree");
  EXPECT_EQ(read.ends, (std::vector<size_t>{3, 12, 17}));

  // A plain text file is one document, ending with a newline.
  write_bytes(dir / "plain.txt", "a plain\nfile");
  const CorpusDocuments mixed = read_corpus_documents({dir / "plain.txt", dir / "data.jsonl"}, {"body", true});
  EXPECT_EQ(mixed.text, "a plain\nfile\nonetwo\nlinesthree");
  EXPECT_EQ(mixed.ends, (std::vector<size_t>{13, 16, 25, 30}));

  write_bytes(dir / "none.jsonl", "{\"text\": 1}\n");
  EXPECT_THAT(error_of([&] { read_corpus_documents({dir / "none.jsonl"}, {"text", true}); }),
              HasSubstr("holds no record with text"));
}

TEST(CorpusInput, ReadsGzipAndZstdByTheirMagicBytes) {
  TempDir dir;
  const std::vector<std::string> texts = documents(50);
  const std::string lines = json_lines(texts);
  const std::string plain = texts[0] + "\n" + texts[1] + "\n";
  write_bytes(dir / "plain.txt", plain);
  write_bytes(dir / "plain.txt.gz", gzip(plain.substr(0, 100)) + gzip(plain.substr(100)));  // two gzip members
  write_bytes(dir / "plain.zst", zstd(plain));
  write_bytes(dir / "records.jsonl", lines);
  write_bytes(dir / "records.jsonl.gz", gzip(lines));
  write_bytes(dir / "records.jsonl.zst", zstd(lines.substr(0, 500)) + zstd(lines.substr(500)));  // two frames
  write_bytes(dir / "unnamed", gzip(plain));  // found by its magic bytes alone

  for (const char* name : {"plain.txt.gz", "plain.zst", "unnamed"}) {
    EXPECT_EQ(read_maybe_compressed(dir / name), plain) << name;
  }
  const CorpusDocuments expected = read_corpus_documents({dir / "records.jsonl"}, {});
  EXPECT_EQ(expected.ends.size(), 50u);
  for (const char* name : {"records.jsonl.gz", "records.jsonl.zst"}) {
    const CorpusDocuments read = read_corpus_documents({dir / name}, {});
    EXPECT_EQ(read.text, expected.text) << name;
    EXPECT_EQ(read.ends, expected.ends) << name;
  }

  // Truncated and mislabelled data are errors naming the file.
  write_bytes(dir / "cut.gz", gzip(lines).substr(0, 200));
  write_bytes(dir / "cut.zst", zstd(lines).substr(0, 200));
  write_bytes(dir / "fake.zst", plain);
  EXPECT_THAT(error_of([&] { read_maybe_compressed(dir / "cut.gz"); }),
              HasSubstr(fmt::format("'{}' ends in the middle of its gzip data", (dir / "cut.gz").string())));
  EXPECT_THAT(error_of([&] { read_maybe_compressed(dir / "cut.zst"); }),
              HasSubstr(fmt::format("'{}' ends in the middle of its zstd data", (dir / "cut.zst").string())));
  EXPECT_THAT(error_of([&] { read_maybe_compressed(dir / "fake.zst"); }),
              HasSubstr("is named .zst but does not start as zstd data does"));
}

// The token streams split at `eos`, each piece decoded.
std::vector<std::string> decoded_documents(const Tokenizer& tokenizer, const std::vector<fs::path>& shards,
                                           int32_t eos, bool& ends_with_eos) {
  std::vector<int32_t> tokens;
  for (const fs::path& path : shards) {
    TokenShard shard(path);
    const size_t start = tokens.size();
    tokens.resize(start + static_cast<size_t>(shard.size()));
    shard.read(0, shard.size(), tokens.data() + start);
  }
  std::vector<std::string> texts;
  auto begin = tokens.begin();
  for (auto end = std::find(begin, tokens.end(), eos); end != tokens.end(); end = std::find(begin, tokens.end(), eos)) {
    texts.push_back(tokenizer.decode(std::vector<int32_t>(begin, end)));
    begin = end + 1;
  }
  ends_with_eos = begin == tokens.end();
  return texts;
}

TEST(CorpusInput, EveryDocumentEndsWithTheTokenizersEos) {
  TempDir dir;
  const std::vector<std::string> texts = documents(200);
  write_bytes(dir / "records.jsonl.zst", zstd(json_lines(texts)));
  const CorpusMeta meta = prepare_corpus({dir / "records.jsonl.zst"}, dir / "out", 300);
  const Tokenizer tokenizer(meta.tokenizer);
  ASSERT_EQ(tokenizer.eos_id(), 2);  // SentencePiece's </s>
  EXPECT_EQ(meta.document_end_id, 2);
  EXPECT_EQ(meta.documents, 200);

  // Documents hold no line break, so chunks end at document ends: each split is whole documents in order,
  // every one followed by eos, the k-th chunks in validation.
  bool train_ends = false, val_ends = false;
  const std::vector<std::string> train = decoded_documents(tokenizer, meta.train_shards, 2, train_ends);
  const std::vector<std::string> val = decoded_documents(tokenizer, meta.val_shards, 2, val_ends);
  EXPECT_TRUE(train_ends);
  EXPECT_TRUE(val_ends);
  EXPECT_EQ(train.size() + val.size(), texts.size());
  EXPECT_FALSE(val.empty());
  std::vector<std::string> all = train;
  all.insert(all.end(), val.begin(), val.end());
  std::vector<std::string> expected = texts;
  std::sort(all.begin(), all.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
  EXPECT_TRUE(std::is_sorted(train.begin(), train.end(), [&](const std::string& a, const std::string& b) {
    return std::find(texts.begin(), texts.end(), a) < std::find(texts.begin(), texts.end(), b);
  }));
}

}  // namespace
}  // namespace strata
