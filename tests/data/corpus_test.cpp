// prepare_corpus: the split rule of data/README.md restated here, shard
// contents decoded back to the text they came from, and the unigram
// baselines recomputed from the shards.
#include "data/corpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/hf_tokenizer.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::list_names;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

using testing::error_of;

std::string generated_lines(uint32_t seed, size_t bytes) {
  const char* words[] = {"the", "king", "said", "to", "his", "queen", "and", "her", "lord", "of", "night", "day"};
  std::string text;
  while (text.size() < bytes) {
    seed = seed * 1664525u + 1013904223u;
    int count = 2 + static_cast<int>((seed >> 12) % 9);
    for (int w = 0; w < count; ++w) {
      seed = seed * 1664525u + 1013904223u;
      text += words[(seed >> 10) % 12];
      text += w + 1 < count ? " " : ".\n";
    }
  }
  return text;
}

std::vector<int32_t> read_shards(const std::vector<fs::path>& paths) {
  std::vector<int32_t> tokens;
  for (const auto& path : paths) {
    TokenShard shard(path);
    size_t start = tokens.size();
    tokens.resize(start + static_cast<size_t>(shard.size()));
    shard.read(0, shard.size(), tokens.data() + start);
  }
  return tokens;
}

// The documented split: chunks of whole lines closed once they reach
// min(64 KiB, ceil(bytes / (10 k))) bytes; chunk i is validation when i % k == k - 1.
std::pair<std::string, std::string> expected_split(const std::string& text, double val_fraction) {
  size_t k = static_cast<size_t>(std::lround(1 / val_fraction));
  size_t target = std::min<size_t>(64 * 1024, (text.size() + 10 * k - 1) / (10 * k));
  std::string train, val, chunk;
  size_t index = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start) + 1;
    chunk += text.substr(start, end - start);
    start = end;
    if (chunk.size() >= target || start == text.size()) {
      (index % k == k - 1 ? val : train) += chunk;
      chunk.clear();
      ++index;
    }
  }
  return {train, val};
}

TEST(Corpus, PreparesShardsTokenizerAndMeta) {
  TempDir dir;
  std::string first = generated_lines(1, 60000);
  std::string second = generated_lines(2, 40000);
  second.pop_back();  // no final newline: one is added when joining
  write_bytes(dir / "a.txt", first);
  write_bytes(dir / "b.txt", second);
  CorpusOptions options;
  options.shard_tokens = 10000;
  CorpusMeta meta = prepare_corpus({dir / "a.txt", dir / "b.txt"}, dir / "out", 300, options);

  // ceil(tokens / shard_tokens) shards each; the validation text fits in one.
  const int64_t train_shards = (meta.train_tokens + 9999) / 10000;
  ASSERT_GE(train_shards, 2);
  std::vector<std::string> expected_names{"meta.json", "tokenizer.model"};
  for (int64_t i = 0; i < train_shards; ++i) expected_names.push_back(fmt::format("train_{:03d}.bin", i));
  expected_names.push_back("val_000.bin");
  EXPECT_EQ(list_names(dir / "out"), expected_names);
  EXPECT_EQ(meta.vocab_size, 300);
  EXPECT_EQ(meta.tokenizer, dir / "out" / "tokenizer.model");

  // Every token decodes back to exactly the text the split rule assigns.
  auto [train_text, val_text] = expected_split(first + second + "\n", 0.05);
  Tokenizer tokenizer(meta.tokenizer);
  std::vector<int32_t> train = read_shards(meta.train_shards);
  std::vector<int32_t> val = read_shards(meta.val_shards);
  EXPECT_EQ(tokenizer.decode(train), train_text);
  EXPECT_EQ(tokenizer.decode(val), val_text);
  EXPECT_EQ(meta.train_tokens, static_cast<int64_t>(train.size()));
  EXPECT_EQ(meta.val_tokens, static_cast<int64_t>(val.size()));
  double val_share = static_cast<double>(val_text.size()) / static_cast<double>(first.size() + second.size() + 1);
  EXPECT_NEAR(val_share, 0.05, 0.01);

  // Near-equal shards, none above the limit.
  for (const auto& path : meta.train_shards) {
    int64_t size = TokenShard(path).size();
    EXPECT_LE(size, 10000);
    EXPECT_LE(std::abs(size - meta.train_tokens / train_shards), 1);
  }

  // Unigram baselines, from their definitions.
  std::vector<double> counts(300, 0);
  for (int32_t token : train) counts[static_cast<size_t>(token)] += 1;
  double entropy = 0;
  for (double count : counts) {
    if (count > 0) entropy -= count / static_cast<double>(train.size()) * std::log(count / static_cast<double>(train.size()));
  }
  double cross_entropy = 0;
  for (int32_t token : val) {
    cross_entropy -= std::log((counts[static_cast<size_t>(token)] + 1) / static_cast<double>(train.size() + 300));
  }
  cross_entropy /= static_cast<double>(val.size());
  EXPECT_NEAR(meta.train_unigram_entropy, entropy, 1e-9);
  EXPECT_NEAR(meta.val_unigram_cross_entropy, cross_entropy, 1e-9);
  EXPECT_LE(entropy, std::log(300.0));

  // meta.json round trips and holds the documented keys.
  CorpusMeta read = read_corpus_meta(dir / "out");
  EXPECT_EQ(read.vocab_size, meta.vocab_size);
  EXPECT_EQ(read.train_shards, meta.train_shards);
  EXPECT_EQ(read.val_shards, meta.val_shards);
  EXPECT_EQ(read.train_tokens, meta.train_tokens);
  EXPECT_DOUBLE_EQ(read.val_unigram_cross_entropy, meta.val_unigram_cross_entropy);
  nlohmann::json document = nlohmann::json::parse(read_bytes(dir / "out" / "meta.json"));
  EXPECT_EQ(document["vocab_size"], 300);
  EXPECT_EQ(document["train_tokens"], meta.train_tokens);
  EXPECT_EQ(document["val_tokens"], meta.val_tokens);
  EXPECT_DOUBLE_EQ(document["train_unigram_entropy_nats"].get<double>(), entropy);

  // A failed re-preparation leaves no meta.json, so the directory is not mistaken for a complete corpus.
  EXPECT_THAT(error_of([&] { prepare_corpus({dir / "a.txt"}, dir / "out", 50); }), HasSubstr("vocab_size 50"));
  EXPECT_FALSE(fs::exists(dir / "out" / "meta.json"));
}

const fs::path kLlama3Style = fs::path(STRATA_SOURCE_DIR) / "tests" / "data" / "fixtures" / "bpe_llama3_style";

TEST(Corpus, EncodesWithAGivenTokenizerAndCopiesItIn) {
  TempDir dir;
  const std::string text = generated_lines(4, 30000);
  write_bytes(dir / "a.txt", text);
  CorpusMeta meta = prepare_corpus({dir / "a.txt"}, dir / "out", kLlama3Style);

  // The corpus stands on its own: the tokenizer's files are in it, and meta.json says where they came from.
  EXPECT_EQ(list_names(dir / "out"), (std::vector<std::string>{"meta.json", "tokenizer.json", "tokenizer_config.json",
                                                                "train_000.bin", "val_000.bin"}));
  EXPECT_EQ(read_bytes(dir / "out" / "tokenizer.json"), read_bytes(kLlama3Style / "tokenizer.json"));
  EXPECT_EQ(meta.tokenizer, dir / "out" / "tokenizer.json");
  EXPECT_EQ(meta.vocab_size, 2002);  // the tokenizer's, added tokens included
  nlohmann::json document = nlohmann::json::parse(read_bytes(dir / "out" / "meta.json"));
  EXPECT_EQ(document["tokenizer"], "tokenizer.json");
  EXPECT_EQ(document["tokenizer_format"], "huggingface");
  EXPECT_EQ(document["tokenizer_source"], fs::absolute(kLlama3Style).string());
  EXPECT_EQ(document["vocab_size"], 2002);

  CorpusMeta read = read_corpus_meta(dir / "out");
  EXPECT_EQ(read.tokenizer, dir / "out" / "tokenizer.json");
  Tokenizer tokenizer = load_tokenizer(read.tokenizer);
  EXPECT_EQ(tokenizer.bos_id(), 2000);  // tokenizer_config.json came along
  auto [train_text, val_text] = expected_split(text, 0.05);
  std::vector<int32_t> train = read_shards(meta.train_shards);
  std::vector<int32_t> val = read_shards(meta.val_shards);
  // The file is one document: the tokenizer's eos ends it, in the split that took the last chunk.
  ASSERT_EQ(tokenizer.eos_id(), 2001);
  std::vector<int32_t>& last = val.back() == 2001 ? val : train;
  EXPECT_EQ(last.back(), 2001);
  last.pop_back();
  EXPECT_EQ(std::count(train.begin(), train.end(), 2001) + std::count(val.begin(), val.end(), 2001), 0);
  EXPECT_EQ(tokenizer.encode(train_text), train);
  EXPECT_EQ(tokenizer.decode(val), val_text);
  EXPECT_EQ(TokenShard(meta.train_shards[0]).token_bytes(), 2u);

  // Preparing again with a trained tokenizer leaves no tokenizer.json behind for load_tokenizer to prefer.
  prepare_corpus({dir / "a.txt"}, dir / "out", 300);
  EXPECT_EQ(load_tokenizer(dir / "out").format(), "sentencepiece");
  EXPECT_FALSE(fs::exists(dir / "out" / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(dir / "out" / "tokenizer_config.json"));
  EXPECT_FALSE(nlohmann::json::parse(read_bytes(dir / "out" / "meta.json")).contains("tokenizer_source"));
  // And the other way round; a SentencePiece file given by name is copied as tokenizer.model.
  prepare_corpus({dir / "a.txt"}, dir / "hf", kLlama3Style / "tokenizer.json");
  prepare_corpus({dir / "a.txt"}, dir / "hf", dir / "out" / "tokenizer.model");
  EXPECT_EQ(list_names(dir / "hf"),
            (std::vector<std::string>{"meta.json", "tokenizer.model", "train_000.bin", "val_000.bin"}));
  EXPECT_EQ(read_corpus_meta(dir / "hf").vocab_size, 300);

  // Preparing inside the model directory itself keeps its files.
  fs::create_directories(dir / "model");
  fs::copy_file(kLlama3Style / "tokenizer.json", dir / "model" / "tokenizer.json");
  prepare_corpus({dir / "a.txt"}, dir / "model", dir / "model");
  EXPECT_EQ(read_bytes(dir / "model" / "tokenizer.json"), read_bytes(kLlama3Style / "tokenizer.json"));
  EXPECT_EQ(read_corpus_meta(dir / "model").vocab_size, 2002);
}

TEST(Corpus, VocabulariesPastUint16GiveLlmcUint32Shards) {
  TempDir dir;
  // The LLaMA-3-style fixture with one more special token far out, as LLaMA 3's 128256 ids are.
  nlohmann::json document = nlohmann::json::parse(read_bytes(kLlama3Style / "tokenizer.json"));
  document["added_tokens"].push_back({{"id", 70000}, {"content", "<|far|>"}, {"single_word", false},
                                      {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                                      {"special", true}});
  fs::create_directories(dir / "model");
  write_bytes(dir / "model" / "tokenizer.json", document.dump());
  std::string text = generated_lines(5, 20000);
  text.insert(text.find('\n') + 1, "<|far|>\n");
  write_bytes(dir / "a.txt", text);
  CorpusMeta meta = prepare_corpus({dir / "a.txt"}, dir / "out", dir / "model");
  EXPECT_EQ(meta.vocab_size, 70001);
  const std::string shard = read_bytes(meta.train_shards[0]);
  int32_t header[3];
  std::memcpy(header, shard.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  std::vector<int32_t> train = read_shards(meta.train_shards);
  EXPECT_NE(std::find(train.begin(), train.end(), 70000), train.end());
}

TEST(Corpus, ABadTokenizerFailsBeforeTheDirectoryChanges) {
  TempDir dir;
  write_bytes(dir / "a.txt", generated_lines(6, 30000));
  prepare_corpus({dir / "a.txt"}, dir / "out", 300);
  const std::string before = read_bytes(dir / "out" / "meta.json");

  std::string message = error_of([&] { prepare_corpus({dir / "a.txt"}, dir / "out", dir / "absent"); });
  EXPECT_THAT(message, HasSubstr((dir / "absent").string()));
  write_bytes(dir / "broken.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  message = error_of([&] { prepare_corpus({dir / "a.txt"}, dir / "out", dir / "broken.json"); });
  EXPECT_THAT(message, HasSubstr((dir / "broken.json").string()));
  EXPECT_THAT(message, HasSubstr("model.type is \"WordPiece\""));
  EXPECT_EQ(read_bytes(dir / "out" / "meta.json"), before);
}

TEST(Corpus, ErrorsNameTheInput) {
  TempDir dir;
  write_bytes(dir / "good.txt", generated_lines(3, 30000));
  write_bytes(dir / "empty.txt", "");
  write_bytes(dir / "tiny.txt", "one line\ntwo lines\n");

  std::string missing = (dir / "absent.txt").string();
  EXPECT_THAT(error_of([&] { prepare_corpus({missing}, dir / "out", 300); }), HasSubstr(missing));

  std::string message = error_of([&] { prepare_corpus({dir / "good.txt", dir / "empty.txt"}, dir / "out", 300); });
  EXPECT_THAT(message, HasSubstr((dir / "empty.txt").string()));
  EXPECT_THAT(message, HasSubstr("empty"));

  message = error_of([&] { prepare_corpus({dir / "tiny.txt"}, dir / "out", 300); });
  EXPECT_THAT(message, HasSubstr((dir / "tiny.txt").string()));
  EXPECT_THAT(message, HasSubstr("too small to split"));

  CorpusOptions bad_fraction;
  bad_fraction.val_fraction = 0.7;
  EXPECT_THAT(error_of([&] { prepare_corpus({dir / "good.txt"}, dir / "out", 300, bad_fraction); }),
              HasSubstr("val_fraction 0.7"));

  message = error_of([&] { prepare_corpus({dir / "good.txt"}, dir / "out", 50); });
  EXPECT_THAT(message, HasSubstr("vocab_size 50"));
  EXPECT_THAT(message, HasSubstr((dir / "good.txt").string()));
  EXPECT_FALSE(fs::exists(dir / "out" / "meta.json"));

  message = error_of([&] { read_corpus_meta(dir / "out"); });
  EXPECT_THAT(message, HasSubstr((dir / "out" / "meta.json").string()));
}

}  // namespace
}  // namespace strata
