#include "data/sentencepiece_to_hf.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "data/sentencepiece_proto.h"
#include "data/utf8.h"

namespace strata {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space

void check_convertible(const SentencePieceProto& proto, const fs::path& file) {
  auto refuse = [&](std::string_view what) {
    fail("cannot write a tokenizer.json for '{}': {} has no equivalent there (this conversion reads SentencePiece "
         "BPE models with identity normalisation and escaped spaces)",
         file.string(), what);
  };
  if (proto.model_type != SentencePieceModelType::Bpe) {
    refuse(fmt::format("trainer_spec.model_type {} (not BPE)", static_cast<int>(proto.model_type)));
  }
  if (proto.has_charsmap) refuse(fmt::format("normalizer_spec.precompiled_charsmap ('{}')", proto.normalizer_name));
  if (proto.remove_extra_whitespaces) refuse("normalizer_spec.remove_extra_whitespaces = true");
  if (!proto.escape_whitespaces) refuse("normalizer_spec.escape_whitespaces = false");
  if (proto.treat_whitespace_as_suffix) refuse("trainer_spec.treat_whitespace_as_suffix = true");
}

// Merges of the normal pieces: a piece that splits at a character boundary into two normal pieces
// is reached by merging them. Ranked by the merged piece's score, best first, then by its id.
ordered_json bpe_merges(const std::vector<SentencePiece>& pieces) {
  std::unordered_map<std::string_view, int> normal;
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (pieces[id].type == SentencePieceType::Normal) normal.emplace(pieces[id].text, static_cast<int>(id));
  }
  std::vector<std::tuple<float, int, std::string_view, std::string_view>> merges;  // -score, id, left, right
  for (const auto& [piece, id] : normal) {
    for (size_t cut = utf8_char_length(piece, 0); cut < piece.size(); cut += utf8_char_length(piece, cut)) {
      const std::string_view left = piece.substr(0, cut), right = piece.substr(cut);
      if (normal.count(left) && normal.count(right)) merges.emplace_back(-pieces[id].score, id, left, right);
    }
  }
  std::sort(merges.begin(), merges.end());
  ordered_json pairs = ordered_json::array();
  for (const auto& [score, id, left, right] : merges) pairs.push_back({left, right});
  return pairs;
}

ordered_json bpe_model(const SentencePieceProto& proto) {
  ordered_json vocab = ordered_json::object();
  ordered_json unk = nullptr;
  for (size_t id = 0; id < proto.pieces.size(); ++id) {
    vocab[proto.pieces[id].text] = id;
    if (proto.pieces[id].type == SentencePieceType::Unknown) unk = proto.pieces[id].text;
  }
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", unk},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", true},  // SentencePiece joins a run of unknown characters into one <unk>
          {"byte_fallback", proto.byte_fallback},
          {"ignore_merges", false},
          {"vocab", std::move(vocab)},
          {"merges", bpe_merges(proto.pieces)}};
}

ordered_json added_tokens(const std::vector<SentencePiece>& pieces) {
  ordered_json tokens = ordered_json::array();
  for (size_t id = 0; id < pieces.size(); ++id) {
    const SentencePieceType type = pieces[id].type;
    const bool special = type == SentencePieceType::Unknown || type == SentencePieceType::Control;
    if (!special && type != SentencePieceType::UserDefined) continue;
    tokens.push_back({{"id", id},
                      {"content", pieces[id].text},
                      {"single_word", false},
                      {"lstrip", false},
                      {"rstrip", false},
                      {"normalized", false},
                      {"special", special}});
  }
  return tokens;
}

ordered_json decoder(const SentencePieceProto& proto) {
  ordered_json steps = {
      {{"type", "Replace"}, {"pattern", {{"String", kSpaceMarker}}}, {"content", " "}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}},
  };
  if (proto.add_dummy_prefix) steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", std::move(steps)}};
}

}  // namespace

ordered_json sentencepiece_to_hf(const fs::path& model_file) {
  // Loaded by the library first, so a file it refuses gets its own error.
  sentencepiece::SentencePieceProcessor processor;
  const auto status = processor.Load(model_file.string());
  if (!status.ok()) fail("cannot load tokenizer model '{}': {}", model_file.string(), status.message());
  const SentencePieceProto proto =
      read_sentencepiece_proto(processor.serialized_model_proto(), fmt::format("'{}'", model_file.string()));
  check_convertible(proto, model_file);
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added_tokens(proto.pieces)},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Metaspace"},
            {"replacement", kSpaceMarker},
            {"prepend_scheme", proto.add_dummy_prefix ? "first" : "never"},
            {"split", false}}},
          {"post_processor", nullptr},
          {"decoder", decoder(proto)},
          {"model", bpe_model(proto)}};
}

}  // namespace strata
