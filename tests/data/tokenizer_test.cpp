// SentencePiece BPE training on a small generated text: exact round trips,
// byte fallback for unseen characters, determinism and error messages; and
// load_tokenizer's choice among the files of a model directory.
#include "data/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

using testing::error_of;

// About 20 KB of word-like lines over a small alphabet, the same every run.
std::string generated_text() {
  const char* syllables[] = {"ka", "to", "ri", "ne", "sa", "mo", "lu", "pe", "ta", "ko", "ra", "ni"};
  uint32_t state = 12345;
  auto next = [&](uint32_t bound) {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) % bound;
  };
  std::string text;
  while (text.size() < 20000) {
    int words = 3 + static_cast<int>(next(8));
    for (int w = 0; w < words; ++w) {
      int parts = 1 + static_cast<int>(next(3));
      for (int p = 0; p < parts; ++p) text += syllables[next(12)];
      text += w + 1 < words ? " " : (next(2) != 0u ? "." : ",");
    }
    text += "\n";
  }
  return text;
}

TEST(Tokenizer, TrainsAndRoundTripsAnyText) {
  TempDir dir;
  const std::string text = generated_text();
  write_bytes(dir / "corpus.txt", text);
  std::vector<fs::path> files{dir / "corpus.txt"};
  Tokenizer tokenizer = train_tokenizer(files, dir / "tok.model", 300);
  EXPECT_TRUE(fs::exists(dir / "tok.model"));
  EXPECT_EQ(tokenizer.vocab_size(), 300);
  EXPECT_EQ(tokenizer.bos_id(), 1);
  EXPECT_EQ(tokenizer.eos_id(), 2);

  std::vector<int32_t> ids = tokenizer.encode(text);
  EXPECT_LT(ids.size(), text.size() / 2) << "merges should compress the training text";
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 300);
  }
  EXPECT_EQ(tokenizer.decode(ids), text);

  // Unseen characters, runs of spaces, tabs and blank lines survive exactly.
  const std::string unseen = "  Ünïcödé 日本語 🙂\ttab  double  spaces\n\n\nend ";
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(unseen)), unseen);
  EXPECT_EQ(tokenizer.encode("\n").size(), 1u);
  EXPECT_TRUE(tokenizer.encode("").empty());

  // Reloading from the file gives the same tokenizer.
  Tokenizer reloaded(dir / "tok.model");
  EXPECT_EQ(reloaded.encode(text), ids);
  EXPECT_EQ(reloaded.format(), "sentencepiece");
  EXPECT_EQ(reloaded.files(), std::vector<fs::path>{dir / "tok.model"});
}

TEST(Tokenizer, LoadsAModelDirectoryPreferringTokenizerJson) {
  TempDir dir;
  const std::string text = generated_text();
  std::vector<std::string_view> texts{text};
  fs::create_directories(dir / "model");
  train_tokenizer(texts, dir / "model" / "tokenizer.model", 300, "generated text");

  Tokenizer sentencepiece = load_tokenizer(dir / "model");
  EXPECT_EQ(sentencepiece.format(), "sentencepiece");
  EXPECT_EQ(sentencepiece.path(), dir / "model" / "tokenizer.model");
  EXPECT_EQ(sentencepiece.vocab_size(), 300);

  // With both files, tokenizer.json wins, as in transformers' fast tokenizers.
  const fs::path fixture = fs::path(STRATA_SOURCE_DIR) / "tests" / "data" / "fixtures" / "bpe_gpt2_style";
  fs::copy_file(fixture / "tokenizer.json", dir / "model" / "tokenizer.json");
  Tokenizer json = load_tokenizer(dir / "model");
  EXPECT_EQ(json.format(), "huggingface");
  EXPECT_EQ(json.path(), dir / "model" / "tokenizer.json");
  EXPECT_EQ(json.vocab_size(), 2000);
  EXPECT_EQ(json.decode(json.encode(text)), text);

  // A file is read by its extension; the constructor loads as load_tokenizer does.
  EXPECT_EQ(load_tokenizer(fixture / "tokenizer.json").format(), "huggingface");
  EXPECT_EQ(Tokenizer(dir / "model").format(), "huggingface");
  EXPECT_EQ(load_tokenizer(dir / "model" / "tokenizer.model").format(), "sentencepiece");

  fs::create_directories(dir / "empty");
  std::string message = error_of([&] { load_tokenizer(dir / "empty"); });
  EXPECT_THAT(message, HasSubstr((dir / "empty").string()));
  EXPECT_THAT(message, HasSubstr("neither tokenizer.json nor tokenizer.model"));
  EXPECT_THAT(error_of([&] { load_tokenizer(dir / "absent.json"); }), HasSubstr((dir / "absent.json").string()));
}

TEST(Tokenizer, TrainingIsDeterministic) {
  TempDir dir;
  const std::string text = generated_text();
  std::vector<std::string_view> texts{text};
  train_tokenizer(texts, dir / "one.model", 300, "generated text");
  train_tokenizer(texts, dir / "two.model", 300, "generated text");
  EXPECT_EQ(read_bytes(dir / "one.model"), read_bytes(dir / "two.model"));
}

TEST(Tokenizer, LinesLongerThanSentencePieceAcceptsStillTrain) {
  TempDir dir;
  std::string text = generated_text();  // as one 20 KB line, with a two-byte character in it
  std::replace(text.begin(), text.end(), '\n', ' ');
  text += "é";
  std::vector<std::string_view> texts{text};
  Tokenizer tokenizer = train_tokenizer(texts, dir / "long.model", 300, "one long line");
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  EXPECT_LT(tokenizer.encode(text).size(), text.size() / 2);
}

TEST(Tokenizer, ErrorsNameTheFileOrValue) {
  TempDir dir;
  write_bytes(dir / "corpus.txt", generated_text());
  write_bytes(dir / "empty.txt", "");

  std::vector<fs::path> missing{dir / "absent.txt"};
  EXPECT_THAT(error_of([&] { train_tokenizer(missing, dir / "t.model", 300); }),
              HasSubstr((dir / "absent.txt").string()));

  std::vector<fs::path> empty{dir / "corpus.txt", dir / "empty.txt"};
  std::string message = error_of([&] { train_tokenizer(empty, dir / "t.model", 300); });
  EXPECT_THAT(message, HasSubstr((dir / "empty.txt").string()));
  EXPECT_THAT(message, HasSubstr("empty"));

  std::vector<fs::path> good{dir / "corpus.txt"};
  EXPECT_THAT(error_of([&] { train_tokenizer(good, dir / "t.model", 0); }), HasSubstr("vocab_size 0"));
  message = error_of([&] { train_tokenizer(good, dir / "t.model", 100); });
  EXPECT_THAT(message, HasSubstr("vocab_size 100"));
  EXPECT_THAT(message, HasSubstr((dir / "corpus.txt").string()));
  EXPECT_THAT(message, HasSubstr("Vocabulary size"));
  EXPECT_FALSE(fs::exists(dir / "t.model"));

  std::vector<std::string_view> blank_lines{"\n\n\n"};
  EXPECT_THAT(error_of([&] { train_tokenizer(blank_lines, dir / "t.model", 300, "'blank.txt'"); }),
              HasSubstr("'blank.txt': it holds no text"));

  Tokenizer tokenizer = train_tokenizer(good, dir / "ok.model", 300);
  std::vector<int32_t> bad_ids{5, 300};
  message = error_of([&] { tokenizer.decode(bad_ids); });
  EXPECT_THAT(message, HasSubstr((dir / "ok.model").string()));
  EXPECT_THAT(message, HasSubstr("id 300"));

  std::string absent_model = (dir / "absent.model").string();
  EXPECT_THAT(error_of([&] { Tokenizer t(absent_model); }), HasSubstr(absent_model));
  write_bytes(dir / "garbage.model", "this is not a model");
  EXPECT_THAT(error_of([&] { Tokenizer t(dir / "garbage.model"); }), HasSubstr((dir / "garbage.model").string()));
}

}  // namespace
}  // namespace strata
