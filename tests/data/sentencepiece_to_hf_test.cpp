// A SentencePiece model as a HuggingFace tokenizer.json: the model file's
// fields as libsentencepiece itself reports them, the converted tokenizer
// encoding and decoding as libsentencepiece does, refusals of what has no
// equivalent, and the files a model directory gets (hf_tokenizer_files.h).
#include "data/sentencepiece_to_hf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <nlohmann/json.hpp>

#include "core/json_file.h"
#include "data/hf_tokenizer.h"
#include "data/hf_tokenizer_files.h"
#include "data/sentencepiece_proto.h"
#include "data/sentencepiece_tokenizer.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

// About 30 KB of word-like lines with runs of spaces and tabs, the same every run.
std::string training_text() {
  const char* syllables[] = {"ka", "to", "ri", "ne", "sa", "mo", "lu", "pe", "ta", "ko", "ra", "ni", "é"};
  const char* gaps[] = {" ", " ", " ", "  ", "\t", " \t "};
  uint32_t state = 777;
  auto next = [&](uint32_t bound) {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) % bound;
  };
  std::string text;
  while (text.size() < 30000) {
    const int words = 3 + static_cast<int>(next(8));
    for (int w = 0; w < words; ++w) {
      for (uint32_t p = 0, parts = 1 + next(3); p < parts; ++p) text += syllables[next(13)];
      text += w + 1 < words ? gaps[next(6)] : ".";
    }
    text += "\n";
  }
  return text;
}

const std::vector<std::string> kTexts = {
    training_text().substr(0, 4000),
    "  leading spaces, trailing ones  \n\n\ttabs\t\tand   runs    of spaces\n",
    "unseen characters fall back to bytes: 中文, 🙂👍🏽, ZWJ 👨‍👩‍👧, ü and é",
    " ",
    "\n\n",
    "katorine sa\nmo lu\n",
};

Tokenizer train(const TempDir& dir) {
  const std::string text = training_text();
  std::vector<std::string_view> texts{text};
  return train_tokenizer(texts, dir / "tokenizer.model", 400, "generated text");
}

TEST(SentencePieceProto, ReadsTheFieldsTheLibraryReports) {
  TempDir dir;
  train(dir);
  sentencepiece::SentencePieceProcessor processor;
  ASSERT_TRUE(processor.Load((dir / "tokenizer.model").string()).ok());
  const SentencePieceProto proto = read_sentencepiece_proto(read_bytes(dir / "tokenizer.model"), "model");
  ASSERT_EQ(proto.pieces.size(), static_cast<size_t>(processor.GetPieceSize()));
  for (int id = 0; id < processor.GetPieceSize(); ++id) {
    const SentencePiece& piece = proto.pieces[static_cast<size_t>(id)];
    EXPECT_EQ(piece.text, processor.IdToPiece(id)) << id;
    EXPECT_EQ(piece.score, processor.GetScore(id)) << id;
    EXPECT_EQ(piece.type == SentencePieceType::Unknown, processor.IsUnknown(id)) << id;
    EXPECT_EQ(piece.type == SentencePieceType::Control, processor.IsControl(id)) << id;
    EXPECT_EQ(piece.type == SentencePieceType::Byte, processor.IsByte(id)) << id;
  }
  EXPECT_EQ(proto.pieces[3].text, "\n");  // the user-defined line break
  EXPECT_EQ(proto.pieces[3].type, SentencePieceType::UserDefined);
  // The options train_tokenizer documents.
  EXPECT_EQ(proto.model_type, SentencePieceModelType::Bpe);
  EXPECT_TRUE(proto.byte_fallback);
  EXPECT_EQ(proto.normalizer_name, "identity");
  EXPECT_FALSE(proto.has_charsmap);
  EXPECT_FALSE(proto.add_dummy_prefix);
  EXPECT_FALSE(proto.remove_extra_whitespaces);
  EXPECT_TRUE(proto.escape_whitespaces);
  EXPECT_FALSE(proto.treat_whitespace_as_suffix);

  EXPECT_THAT(error_of([] { read_sentencepiece_proto(std::string("\x0a\x7f", 2), "'bad.model'"); }),
              HasSubstr("'bad.model' is not a SentencePiece model"));
}

TEST(SentencePieceToHf, EncodesAndDecodesAsTheLibrary) {
  TempDir dir;
  const Tokenizer sentencepiece = train(dir);
  fs::create_directories(dir / "hf");
  write_bytes(dir / "hf" / "tokenizer.json", sentencepiece_to_hf(dir / "tokenizer.model").dump());
  const Tokenizer converted(load_hf_tokenizer(dir / "hf" / "tokenizer.json"));
  EXPECT_EQ(converted.vocab_size(), sentencepiece.vocab_size());
  for (const std::string& text : kTexts) {
    const std::vector<int32_t> ids = sentencepiece.encode(text);
    EXPECT_EQ(converted.encode(text), ids) << text;
    EXPECT_EQ(converted.decode(ids), sentencepiece.decode(ids)) << text;
    EXPECT_EQ(converted.decode(ids), text);
  }
}

TEST(SentencePieceToHf, RefusesWhatHasNoEquivalent) {
  TempDir dir;
  const std::string text = training_text();
  auto train_with = [&](const std::string& name, const std::string& options) {
    const std::string prefix = (dir / name).string();
    std::string spec = "--input=" + (dir / "text.txt").string() + " --model_prefix=" + prefix +
                       " --vocab_size=200 --minloglevel=2 " + options;
    EXPECT_TRUE(sentencepiece::SentencePieceTrainer::Train(spec).ok()) << spec;
    return fs::path(prefix + ".model");
  };
  write_bytes(dir / "text.txt", text);
  const fs::path unigram = train_with("unigram", "--model_type=unigram --normalization_rule_name=identity");
  EXPECT_THAT(error_of([&] { sentencepiece_to_hf(unigram); }), HasSubstr("trainer_spec.model_type 1 (not BPE)"));
  const fs::path nfkc = train_with("nfkc", "--model_type=bpe");
  const std::string message = error_of([&] { sentencepiece_to_hf(nfkc); });
  EXPECT_THAT(message, HasSubstr(nfkc.string()));
  EXPECT_THAT(message, HasSubstr("precompiled_charsmap ('nmt_nfkc')"));
  const fs::path squeezed = train_with("squeezed", "--model_type=bpe --normalization_rule_name=identity");
  EXPECT_THAT(error_of([&] { sentencepiece_to_hf(squeezed); }), HasSubstr("remove_extra_whitespaces = true"));
}

TEST(HfTokenizerFiles, WritesTheSpecialTokensTheTokenizerHas) {
  TempDir dir;
  const Tokenizer sentencepiece = train(dir);
  fs::create_directories(dir / "out");
  write_hf_tokenizer_files(sentencepiece, dir / "out", 128);
  EXPECT_EQ(read_bytes(dir / "out" / "tokenizer.model"), read_bytes(dir / "tokenizer.model"));
  const nlohmann::json config = read_json_file(dir / "out" / "tokenizer_config.json");
  EXPECT_EQ(config["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(config["bos_token"], "<s>");
  EXPECT_EQ(config["eos_token"], "</s>");
  EXPECT_EQ(config["unk_token"], "<unk>");
  EXPECT_FALSE(config.contains("pad_token"));  // the trained tokenizers have none
  EXPECT_EQ(config["clean_up_tokenization_spaces"], false);
  EXPECT_EQ(config["model_max_length"], 128);
  EXPECT_EQ(read_json_file(dir / "out" / "special_tokens_map.json"),
            nlohmann::json({{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}}));
  // Loaded back, the export is the same tokenizer with the same special ids.
  const Tokenizer exported = load_tokenizer(dir / "out");
  EXPECT_EQ(exported.format(), "huggingface");
  EXPECT_EQ(exported.bos_id(), sentencepiece.bos_id());
  EXPECT_EQ(exported.eos_id(), sentencepiece.eos_id());
  EXPECT_EQ(exported.unk_id(), sentencepiece.unk_id());
  EXPECT_EQ(exported.encode(kTexts[1]), sentencepiece.encode(kTexts[1]));

  // A tokenizer.json is copied; its tokenizer_config.json keeps its keys and gains the missing ones.
  nlohmann::json own = read_json_file(dir / "out" / "tokenizer_config.json");
  own.erase("clean_up_tokenization_spaces");
  own.erase("model_max_length");
  own["tokenizer_class"] = "LlamaTokenizer";
  own["chat_template"] = "{{ messages }}";
  own["pad_token"] = "</s>";
  write_bytes(dir / "out" / "tokenizer_config.json", own.dump());
  fs::create_directories(dir / "again");
  write_hf_tokenizer_files(load_tokenizer(dir / "out"), dir / "again", 0);
  EXPECT_EQ(read_bytes(dir / "again" / "tokenizer.json"), read_bytes(dir / "out" / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(dir / "again" / "tokenizer.model"));
  const nlohmann::json copied = read_json_file(dir / "again" / "tokenizer_config.json");
  EXPECT_EQ(copied["tokenizer_class"], "LlamaTokenizer");
  EXPECT_EQ(copied["chat_template"], "{{ messages }}");
  EXPECT_EQ(copied["clean_up_tokenization_spaces"], false);
  EXPECT_FALSE(copied.contains("model_max_length"));
  EXPECT_EQ(read_json_file(dir / "again" / "special_tokens_map.json")["pad_token"], "</s>");
}

}  // namespace
}  // namespace strata
