#include "data/unigram_model.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/json_file.h"
#include "data/utf8.h"

namespace strata {

namespace {

constexpr double kUnknownPenalty = 10.0;  // the library's K_UNK_PENALTY

struct PathEnd {
  double score = 0;     // of the best path ending here
  int64_t start = -1;   // where its last token starts; -1: no path yet
  int32_t id = -1;
};

}  // namespace

UnigramModel::UnigramModel(const nlohmann::json& model, std::string_view where) : where_(where) {
  byte_fallback_ = json_bool(model, "byte_fallback", false, where);
  const std::string vocab_where = json_member(where, "vocab");
  const nlohmann::json& vocab = json_required(model, "vocab", where);
  if (!vocab.is_array() || vocab.empty()) fail("{} is {}, expected a non-empty list", vocab_where, json_excerpt(vocab));
  double lowest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < vocab.size(); ++i) {
    const nlohmann::json& entry = vocab[i];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number()) {
      fail("{}[{}] is {}, expected [token, score]", vocab_where, i, json_excerpt(entry));
    }
    const auto id = static_cast<int32_t>(i);
    tokens_.push_back(entry[0].get<std::string>());
    scores_.push_back(entry[1].get<double>());
    if (!ids_.emplace(tokens_.back(), id).second) {
      fail("{} lists {} twice", vocab_where, entry[0].dump());
    }
    lowest = std::min(lowest, scores_.back());
    longest_token_ = std::max(longest_token_, tokens_.back().size());
  }
  unknown_score_ = lowest - kUnknownPenalty;
  const nlohmann::json& unk = model.contains("unk_id") ? model["unk_id"] : nlohmann::json();
  if (!unk.is_null()) {
    if (!unk.is_number_integer() || unk.get<int64_t>() < 0 || unk.get<int64_t>() >= id_limit()) {
      fail("{} is {}, expected an id of the vocab", json_member(where, "unk_id"), json_excerpt(unk));
    }
    unk_id_ = static_cast<int32_t>(unk.get<int64_t>());
  }
}

std::optional<int32_t> UnigramModel::id_of(std::string_view token) const {
  auto found = ids_.find(token);
  if (found == ids_.end()) return std::nullopt;
  return found->second;
}

const std::string* UnigramModel::token_of(int32_t id) const {
  return id >= 0 && id < id_limit() ? &tokens_[static_cast<size_t>(id)] : nullptr;
}

// The library's encode_optimized: tokens are tried from each character boundary in order of length, a
// later candidate replaces an earlier one only with a strictly higher score.
std::vector<std::string_view> UnigramModel::best_segmentation(std::string_view piece) const {
  std::vector<PathEnd> ends(piece.size() + 1);
  for (size_t start = 0; start < piece.size();) {
    const size_t char_length = utf8_char_length(piece, start);
    const double score_here = ends[start].score;
    auto offer = [&](size_t end, int32_t id, double score) {
      PathEnd& target = ends[end];
      if (target.start < 0 || score_here + score > target.score) {
        target = {score_here + score, static_cast<int64_t>(start), id};
      }
    };
    bool single_character_token = false;
    const size_t limit = std::min(longest_token_, piece.size() - start);
    for (size_t length = char_length; length <= limit; length += utf8_char_length(piece, start + length)) {
      if (std::optional<int32_t> id = id_of(piece.substr(start, length))) {
        offer(start + length, *id, scores_[static_cast<size_t>(*id)]);
        single_character_token |= length == char_length;
      }
      if (start + length == piece.size()) break;
    }
    if (!single_character_token) {
      if (!unk_id_) {
        fail("{}: the unknown character {} needs unk_id, which is null", where_,
             nlohmann::json(std::string(piece.substr(start, char_length))).dump());
      }
      offer(start + char_length, *unk_id_, unknown_score_);
    }
    start += char_length;
  }
  std::vector<std::string_view> strings;
  size_t unknown_end = 0;  // the end of the run of unknown tokens being fused, 0: none
  for (size_t end = piece.size(); end > 0;) {
    const auto start = static_cast<size_t>(ends[end].start);
    if (ends[end].id == unk_id_) {
      if (unknown_end == 0) unknown_end = end;
    } else {
      if (unknown_end != 0) strings.push_back(piece.substr(end, unknown_end - end));
      unknown_end = 0;
      strings.push_back(piece.substr(start, end - start));
    }
    end = start;
  }
  if (unknown_end != 0) strings.push_back(piece.substr(0, unknown_end));
  std::reverse(strings.begin(), strings.end());
  return strings;
}

void UnigramModel::encode(std::string_view piece, std::vector<int32_t>& ids) const {
  for (std::string_view text : best_segmentation(piece)) {
    if (std::optional<int32_t> id = id_of(text)) {
      ids.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      if (std::optional<std::vector<int32_t>> bytes = byte_fallback_ids(*this, text)) {
        ids.insert(ids.end(), bytes->begin(), bytes->end());
        continue;
      }
    }
    ids.push_back(*unk_id_);
  }
}

}  // namespace strata
