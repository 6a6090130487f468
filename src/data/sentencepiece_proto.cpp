#include "data/sentencepiece_proto.h"

#include <cstdint>
#include <cstring>
#include <functional>

#include "core/error.h"

namespace strata {

namespace {

// Field numbers of sentencepiece_model.proto.
constexpr uint32_t kModelPieces = 1, kModelTrainerSpec = 2, kModelNormalizerSpec = 3;
constexpr uint32_t kPieceText = 1, kPieceScore = 2, kPieceType = 3;
constexpr uint32_t kTrainerModelType = 3, kTrainerTreatWhitespaceAsSuffix = 24, kTrainerByteFallback = 35;
constexpr uint32_t kNormalizerName = 1, kNormalizerCharsmap = 2, kNormalizerAddDummyPrefix = 3,
                   kNormalizerRemoveExtraWhitespaces = 4, kNormalizerEscapeWhitespaces = 5;

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field of a message: its number and its value, a varint or fixed32's bits, or a length-delimited payload.
struct WireField {
  uint32_t number = 0;
  uint64_t varint = 0;
  std::string_view bytes;
};

float fixed32_float(const WireField& field) {
  const auto bits = static_cast<uint32_t>(field.varint);
  float value = 0;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

class WireReader {
 public:
  WireReader(std::string_view message, std::string_view where) : rest_(message), where_(where) {}

  // Calls `visit` for every field in order; fixed64 fields (none read here) are skipped.
  void for_each(const std::function<void(const WireField&)>& visit) {
    while (!rest_.empty()) {
      const uint64_t key = varint();
      WireField field{static_cast<uint32_t>(key >> 3), 0, {}};
      switch (static_cast<uint32_t>(key & 7)) {
        case kVarint: field.varint = varint(); break;
        case kFixed64: take(8); continue;
        case kFixed32: field.varint = little_endian(take(4)); break;
        case kLengthDelimited: field.bytes = take(varint()); break;
        default: fail("{} is not a SentencePiece model: wire type {} of field {}", where_, key & 7, field.number);
      }
      visit(field);
    }
  }

 private:
  static uint64_t little_endian(std::string_view bytes) {
    uint64_t value = 0;
    for (size_t i = 0; i < bytes.size(); ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    return value;
  }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto byte = static_cast<uint8_t>(take(1)[0]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail("{} is not a SentencePiece model: a varint runs past 10 bytes", where_);
  }

  std::string_view take(uint64_t count) {
    if (count > rest_.size()) fail("{} is not a SentencePiece model: a field runs past the end", where_);
    std::string_view taken = rest_.substr(0, count);
    rest_.remove_prefix(count);
    return taken;
  }

  std::string_view rest_;
  std::string_view where_;
};

SentencePiece read_piece(std::string_view message, std::string_view where) {
  SentencePiece piece;
  WireReader(message, where).for_each([&](const WireField& field) {
    if (field.number == kPieceText) piece.text = field.bytes;
    if (field.number == kPieceScore) piece.score = fixed32_float(field);
    if (field.number == kPieceType) piece.type = static_cast<SentencePieceType>(field.varint);
  });
  return piece;
}

void read_trainer_spec(std::string_view message, std::string_view where, SentencePieceProto& proto) {
  WireReader(message, where).for_each([&](const WireField& field) {
    if (field.number == kTrainerModelType) proto.model_type = static_cast<SentencePieceModelType>(field.varint);
    if (field.number == kTrainerTreatWhitespaceAsSuffix) proto.treat_whitespace_as_suffix = field.varint != 0;
    if (field.number == kTrainerByteFallback) proto.byte_fallback = field.varint != 0;
  });
}

void read_normalizer_spec(std::string_view message, std::string_view where, SentencePieceProto& proto) {
  WireReader(message, where).for_each([&](const WireField& field) {
    if (field.number == kNormalizerName) proto.normalizer_name = field.bytes;
    if (field.number == kNormalizerCharsmap) proto.has_charsmap = !field.bytes.empty();
    if (field.number == kNormalizerAddDummyPrefix) proto.add_dummy_prefix = field.varint != 0;
    if (field.number == kNormalizerRemoveExtraWhitespaces) proto.remove_extra_whitespaces = field.varint != 0;
    if (field.number == kNormalizerEscapeWhitespaces) proto.escape_whitespaces = field.varint != 0;
  });
}

}  // namespace

SentencePieceProto read_sentencepiece_proto(std::string_view serialized, std::string_view where) {
  SentencePieceProto proto;
  WireReader(serialized, where).for_each([&](const WireField& field) {
    if (field.number == kModelPieces) proto.pieces.push_back(read_piece(field.bytes, where));
    if (field.number == kModelTrainerSpec) read_trainer_spec(field.bytes, where, proto);
    if (field.number == kModelNormalizerSpec) read_normalizer_spec(field.bytes, where, proto);
  });
  return proto;
}

}  // namespace strata
