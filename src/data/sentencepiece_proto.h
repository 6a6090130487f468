#pragma once
// What a SentencePiece model file holds that decides how text is encoded: its
// pieces (text, score, type) and the fields of its TrainerSpec and
// NormalizerSpec that matter. They are read from the protobuf wire format of
// the file, since libsentencepiece-dev ships no ModelProto header; absent
// fields take the .proto's defaults.
#include <string>
#include <string_view>
#include <vector>

namespace strata {

enum class SentencePieceModelType { Unigram = 1, Bpe = 2, Word = 3, Char = 4 };
enum class SentencePieceType { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct SentencePiece {
  std::string text;
  float score = 0;
  SentencePieceType type = SentencePieceType::Normal;
};

struct SentencePieceProto {
  std::vector<SentencePiece> pieces;                                    // in id order
  SentencePieceModelType model_type = SentencePieceModelType::Unigram;  // TrainerSpec.model_type
  bool byte_fallback = false;                                           // TrainerSpec.byte_fallback
  bool treat_whitespace_as_suffix = false;                              // TrainerSpec
  std::string normalizer_name;                                          // NormalizerSpec.name
  bool has_charsmap = false;  // NormalizerSpec.precompiled_charsmap is non-empty
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Reads a serialized ModelProto; `where` names it in errors.
SentencePieceProto read_sentencepiece_proto(std::string_view serialized, std::string_view where);

}  // namespace strata
