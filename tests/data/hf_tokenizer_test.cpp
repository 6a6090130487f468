// HuggingFace tokenizer.json against the `tokenizers` library itself: the
// fixtures (tests/data/fixtures, made by make_bpe_fixture.py) hold byte-level
// BPE tokenizers trained on the KJV text with GPT-2's, LLaMA 3's, Qwen2's and
// SmolLM's pre-tokenizers, hand-written ones for the options those leave
// untouched, and the ids and decoded text the library gives. Then loading
// paths and the errors for files this build cannot read.
#include "data/hf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

const fs::path kFixtures = fs::path(STRATA_SOURCE_DIR) / "tests" / "data" / "fixtures";

json read_fixture(const std::string& name) { return json::parse(read_bytes(kFixtures / name)); }

// A case's text shortened for failure messages.
std::string trace(const std::string& text) {
  return json(text.substr(0, 60)).dump(-1, ' ', false, json::error_handler_t::replace);
}

class HfGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGolden, EncodesAndDecodesAsTheTokenizersLibrary) {
  const json golden = read_fixture("bpe_golden.json");
  const json& family = golden["families"][GetParam()];
  const Tokenizer tokenizer = load_tokenizer(kFixtures / ("bpe_" + GetParam()));
  EXPECT_EQ(tokenizer.format(), "huggingface");
  EXPECT_EQ(tokenizer.vocab_size(), family["vocab_size"].get<int32_t>());
  const bool normalizes = GetParam() == "qwen2_style";  // NFC
  for (const json& sample : family["cases"]) {
    const std::string text = sample["text"];
    SCOPED_TRACE(trace(text));
    const std::vector<int32_t> ids = sample["ids"];
    EXPECT_EQ(tokenizer.encode(text), ids);
    EXPECT_EQ(tokenizer.decode(ids), sample["decoded"].get<std::string>());
    if (!normalizes) {
      EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
    }
    if (sample["decoded_each"].is_null()) continue;
    // One token at a time: a lone byte of a longer character decodes to U+FFFD, as in the library.
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(tokenizer.decode(std::span(ids).subspan(i, 1)), sample["decoded_each"][i].get<std::string>())
          << "token " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, HfGolden,
                         ::testing::Values("gpt2_style", "llama3_style", "qwen2_style", "smollm_style"));

TEST(HfTokenizer, TheGoldenPassageHoldsRealText) {
  const json golden = read_fixture("bpe_golden.json");
  const std::string passage = golden["families"]["llama3_style"]["cases"][0]["text"];
  EXPECT_GT(passage.size(), 4000u);
  for (const char* part :
       {"In the beginning God", "Don't", "it's", "日本語", "\t\t", "   ", "\r\n", "<|end_of_text|>"}) {
    EXPECT_THAT(passage, HasSubstr(part));
  }
}

TEST(HfTokenizer, OptionsEncodeAsTheTokenizersLibrary) {
  const json options = read_fixture("bpe_options.json");
  TempDir dir;
  for (const json& option : options["tokenizers"]) {
    SCOPED_TRACE(option["name"].get<std::string>());
    write_bytes(dir / "tokenizer.json", option["tokenizer"].dump());
    const Tokenizer tokenizer = load_tokenizer(dir / "tokenizer.json");
    for (const json& sample : option["cases"]) {
      const std::string text = sample["text"];
      SCOPED_TRACE(trace(text));
      const std::vector<int32_t> ids = sample["ids"];
      EXPECT_EQ(tokenizer.encode(text), ids);
      EXPECT_EQ(tokenizer.decode(ids), sample["decoded"].get<std::string>());
    }
  }
}

TEST(HfTokenizer, SpecialTokensAndFilesComeFromTheModelDirectory) {
  const Tokenizer llama3 = load_tokenizer(kFixtures / "bpe_llama3_style");
  EXPECT_EQ(llama3.path(), kFixtures / "bpe_llama3_style" / "tokenizer.json");
  EXPECT_EQ(llama3.files(), (std::vector<fs::path>{kFixtures / "bpe_llama3_style" / "tokenizer.json",
                                                   kFixtures / "bpe_llama3_style" / "tokenizer_config.json"}));
  // Added after training, past the BPE vocabulary, as in LLaMA 3.
  EXPECT_EQ(llama3.bos_id(), 2000);
  EXPECT_EQ(llama3.eos_id(), 2001);
  EXPECT_EQ(llama3.encode("<|begin_of_text|>"), (std::vector<int32_t>{2000}));
  EXPECT_EQ(llama3.decode(std::vector<int32_t>{2001}), "<|end_of_text|>");
  EXPECT_EQ(llama3.encode(""), std::vector<int32_t>{});

  // Trained into the vocabulary, first, as GPT-2's <|endoftext|> is a vocabulary entry.
  const Tokenizer gpt2 = load_tokenizer(kFixtures / "bpe_gpt2_style" / "tokenizer.json");
  EXPECT_EQ(gpt2.bos_id(), 0);
  EXPECT_EQ(gpt2.eos_id(), 1);

  // Without tokenizer_config.json, and with {"content": ...} spellings.
  TempDir dir;
  fs::copy_file(kFixtures / "bpe_llama3_style" / "tokenizer.json", dir / "tokenizer.json");
  const Tokenizer bare = load_tokenizer(dir.path());
  EXPECT_EQ(bare.bos_id(), -1);
  EXPECT_EQ(bare.eos_id(), -1);
  EXPECT_EQ(bare.files(), std::vector<fs::path>{dir / "tokenizer.json"});
  write_bytes(dir / "tokenizer_config.json",
              R"({"bos_token": {"content": "<|end_of_text|>", "__type": "AddedToken"}, "eos_token": null})");
  EXPECT_EQ(load_tokenizer(dir.path()).bos_id(), 2001);
  EXPECT_EQ(load_tokenizer(dir.path()).eos_id(), -1);
}

// The hand-written "added_token_flags" tokenizer.json (ids 0..255 the byte
// alphabet, 256..260 added tokens) with one change.
std::string broken_tokenizer(const std::function<void(json&)>& change) {
  const json options = read_fixture("bpe_options.json");
  json document;
  for (const json& option : options["tokenizers"]) {
    if (option["name"] == "added_token_flags") document = option["tokenizer"];
  }
  change(document);
  return document.dump();
}

// transformers writes "" for an absent continuing_subword_prefix and end_of_word_suffix; null, a
// missing key and "" are the same model and encode alike.
TEST(HfTokenizer, AnEmptySubwordPrefixAndSuffixAreNone) {
  TempDir dir;
  const fs::path file = dir / "tokenizer.json";
  write_bytes(file, broken_tokenizer([](json&) {}));
  const std::vector<int32_t> expected = load_tokenizer(file).encode("a <mask> ab");
  write_bytes(file, broken_tokenizer([](json& d) {
    d["model"]["continuing_subword_prefix"] = "";
    d["model"]["end_of_word_suffix"] = "";
  }));
  EXPECT_EQ(load_tokenizer(file).encode("a <mask> ab"), expected);
  write_bytes(file, broken_tokenizer([](json& d) { d["model"]["end_of_word_suffix"] = "</w>"; }));
  EXPECT_THAT(error_of([&] { load_tokenizer(file); }), HasSubstr("model.end_of_word_suffix is \"</w>\""));
}

TEST(HfTokenizer, ErrorsNameTheFileAndKey) {
  TempDir dir;
  const fs::path file = dir / "tokenizer.json";
  const std::string quoted = fmt::format("'{}'", file.string());
  struct Case {
    const char* what;
    std::function<void(json&)> change;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"another model", [](json& d) { d["model"]["type"] = "WordPiece"; }, {"model.type is \"WordPiece\""}},
      {"no model", [](json& d) { d.erase("model"); }, {"model is missing"}},
      {"a merge outside the vocabulary",
       [](json& d) { d["model"]["merges"] = json::array({json::array({"Ġ", "zzz"})}); },
       {"model.merges[0]: \"zzz\" is not in the vocab"}},
      {"a merge of three", [](json& d) { d["model"]["merges"] = {"a b c"}; },
       {"model.merges[0] is \"a b c\"", "two tokens"}},
      {"a merge that is a number", [](json& d) { d["model"]["merges"] = {5}; }, {"model.merges[0] is 5"}},
      {"a negative id", [](json& d) { d["model"]["vocab"]["a"] = -3; }, {"model.vocab[\"a\"] is -3"}},
      {"an id given twice", [](json& d) { d["model"]["vocab"]["a"] = 65; }, {"gives id 65 to both"}},
      {"dropout", [](json& d) { d["model"]["dropout"] = 0.1; }, {"model.dropout is 0.1"}},
      {"a word prefix", [](json& d) { d["model"]["continuing_subword_prefix"] = "##"; },
       {"model.continuing_subword_prefix is \"##\""}},
      {"an unknown unk_token", [](json& d) { d["model"]["unk_token"] = "<nope>"; },
       {"model.unk_token \"<nope>\" is not in the vocab"}},
      {"a BertPreTokenizer", [](json& d) { d["pre_tokenizer"] = {{"type", "BertPreTokenizer"}}; },
       {"pre_tokenizer.type is \"BertPreTokenizer\""}},
      {"a bad step in a sequence",
       [](json& d) {
         d["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", {d["pre_tokenizer"], {{"type", "Whitespace"}}}}};
       },
       {"pre_tokenizer.pretokenizers[1].type is \"Whitespace\""}},
      {"a bad regex",
       [](json& d) {
         d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(\\p{L}"}}}, {"behavior", "Isolated"}};
       },
       {"pre_tokenizer.pattern.Regex: cannot compile the regular expression"}},
      {"an unknown behavior",
       [](json& d) {
         d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Sideways"}};
       },
       {"pre_tokenizer.behavior is \"Sideways\""}},
      {"a Lowercase normalizer", [](json& d) { d["normalizer"] = {{"type", "Lowercase"}}; },
       {"normalizer.type is \"Lowercase\""}},
      {"a WordPiece decoder", [](json& d) { d["decoder"] = {{"type", "WordPiece"}}; },
       {"decoder.type is \"WordPiece\""}},
      {"an added token the vocab spells otherwise", [](json& d) { d["added_tokens"][0]["id"] = 64; },
       {"added_tokens[0]: id 64 is \"<mask>\" here but \"a\""}},
      {"an added token listed twice", [](json& d) { d["added_tokens"][1]["content"] = "<mask>"; },
       {"added_tokens[1]: \"<mask>\"", "listed twice"}},
      {"an added token without content", [](json& d) { d["added_tokens"][0].erase("content"); },
       {"added_tokens[0].content is missing"}},
  };
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.what);
    write_bytes(file, broken_tokenizer(bad.change));
    const std::string message = error_of([&] { load_tokenizer(file); });
    EXPECT_THAT(message, HasSubstr(quoted));
    for (const std::string& part : bad.parts) EXPECT_THAT(message, HasSubstr(part));
  }

  write_bytes(file, "{\"model\": ");
  EXPECT_THAT(error_of([&] { load_tokenizer(file); }), HasSubstr(quoted + ": not valid JSON"));

  write_bytes(file, broken_tokenizer([](json&) {}));
  write_bytes(dir / "tokenizer_config.json", R"({"bos_token": "<|nowhere|>"})");
  std::string message = error_of([&] { load_tokenizer(dir.path()); });
  EXPECT_THAT(message, HasSubstr((dir / "tokenizer_config.json").string() + "': bos_token is \"<|nowhere|>\""));
  write_bytes(dir / "tokenizer_config.json", R"({"eos_token": 7})");
  EXPECT_THAT(error_of([&] { load_tokenizer(dir.path()); }), HasSubstr("': eos_token is 7"));
  fs::remove(dir / "tokenizer_config.json");

  const Tokenizer tokenizer = load_tokenizer(file);
  EXPECT_THAT(error_of([&] { tokenizer.decode(std::vector<int32_t>{261}); }), HasSubstr("id 261"));
  EXPECT_THAT(error_of([&] { tokenizer.decode(std::vector<int32_t>{-1}); }), HasSubstr("id -1"));
}

// As Python's bytes.decode(errors="replace") reads them before the library sees the text.
TEST(HfTokenizer, BytesThatAreNotUtf8AreReadAsReplacementCharacters) {
  TempDir dir;
  write_bytes(dir / "tokenizer.json", broken_tokenizer([](json&) {}));
  const Tokenizer tokenizer = load_tokenizer(dir / "tokenizer.json");
  EXPECT_EQ(tokenizer.encode("ok \xff no \xe2\x82"), tokenizer.encode("ok \uFFFD no \uFFFD"));
}

TEST(HfTokenizer, DecodingAnIdInAGapOfTheVocabularyFails) {
  TempDir dir;
  write_bytes(dir / "tokenizer.json", broken_tokenizer([](json& d) { d["added_tokens"][4]["id"] = 300; }));
  const Tokenizer tokenizer = load_tokenizer(dir / "tokenizer.json");
  EXPECT_EQ(tokenizer.vocab_size(), 301);
  EXPECT_EQ(tokenizer.encode("<s>x"), (std::vector<int32_t>{300}));
  const std::string message = error_of([&] { tokenizer.decode(std::vector<int32_t>{280}); });
  EXPECT_THAT(message, HasSubstr("cannot decode id 280"));
  EXPECT_THAT(message, HasSubstr((dir / "tokenizer.json").string()));
}

}  // namespace
}  // namespace strata
