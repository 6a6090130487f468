#include "data/bpe_model.h"

#include <limits>
#include <queue>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"
#include "core/json_fields.h"
#include "data/utf8.h"

namespace strata {

namespace {

struct Symbol {
  int32_t id;
  int64_t prev, next;  // neighbours' indices, -1 at either end
  bool removed;        // merged into its left neighbour
};

struct Candidate {
  size_t pos;  // the left symbol of the pair
  uint32_t rank;
  int32_t merged_id;
  // The queue pops the lowest rank first, and the leftmost pair among equal ranks.
  bool operator<(const Candidate& other) const { return rank != other.rank ? rank > other.rank : pos > other.pos; }
};

// The `tokenizers` library's Word::merge_all, step for step: its order of merges
// decides which of two overlapping pairs wins, so it is copied rather than redone.
template <typename FindMerge>
void merge_all(std::vector<Symbol>& symbols, const FindMerge& find_merge) {
  std::priority_queue<Candidate> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const auto* merge = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({i, merge->rank, merge->merged_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    // A stale entry: the pair at this place has changed since it was queued. Like the library, only the
    // merged token is compared, not the rank.
    const auto* current = find_merge(left.id, right.id);
    if (current == nullptr || current->merged_id != top.merged_id) continue;
    left.id = top.merged_id;
    left.next = right.next;
    right.removed = true;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = static_cast<int64_t>(top.pos);
    if (left.prev >= 0) {
      if (const auto* merge = find_merge(symbols[static_cast<size_t>(left.prev)].id, left.id)) {
        queue.push({static_cast<size_t>(left.prev), merge->rank, merge->merged_id});
      }
    }
    if (left.next >= 0) {
      if (const auto* merge = find_merge(left.id, symbols[static_cast<size_t>(left.next)].id)) {
        queue.push({top.pos, merge->rank, merge->merged_id});
      }
    }
  }
}

// A merge's two tokens, from "a b" or ["a", "b"].
std::pair<std::string, std::string> merge_parts(const nlohmann::json& merge, const std::string& where) {
  if (merge.is_string()) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      fail("{} is {}, expected two tokens separated by one space", where, json_excerpt(merge));
    }
    return {text.substr(0, space), text.substr(space + 1)};
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  fail("{} is {}, expected \"a b\" or [\"a\", \"b\"]", where, json_excerpt(merge));
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, std::string_view where) {
  // Options that would make encoding random or respell pieces; none of the models read here uses them.
  const nlohmann::json& dropout = model.contains("dropout") ? model["dropout"] : nlohmann::json();
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0)) {
    fail("{} is {}: dropout makes encoding random; this build reads null or 0", json_member(where, "dropout"),
         json_excerpt(dropout));
  }
  // Current transformers writes "" for an absent prefix or suffix: the same as none.
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      fail("{} is {}: this build reads BPE models without one", json_member(where, key),
           json_excerpt(model[key]));
    }
  }
  fuse_unk_ = json_bool(model, "fuse_unk", false, where);
  byte_fallback_ = json_bool(model, "byte_fallback", false, where);
  ignore_merges_ = json_bool(model, "ignore_merges", false, where);

  const std::string vocab_where = json_member(where, "vocab");
  const nlohmann::json& vocab = json_required(model, "vocab", where);
  expect_json_object(vocab, vocab_where);
  vocab_.reserve(vocab.size());
  for (const auto& [token, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= std::numeric_limits<int32_t>::max()) {
      fail("{}[{}] is {}, expected an id in [0, 2^31 - 1)", vocab_where, nlohmann::json(token).dump(),
           json_excerpt(value));
    }
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    auto [entry, inserted] = vocab_.emplace(token, id);
    auto [slot, fresh] = tokens_.emplace(id, &entry->first);
    if (!fresh) {
      fail("{} gives id {} to both {} and {}", vocab_where, id, nlohmann::json(*slot->second).dump(),
           nlohmann::json(token).dump());
    }
    id_limit_ = std::max(id_limit_, id + 1);
  }

  const std::string merges_where = json_member(where, "merges");
  const nlohmann::json& merges = json_required(model, "merges", where);
  if (!merges.is_array()) fail("{} is {}, expected a list", merges_where, json_excerpt(merges));
  merges_.reserve(merges.size());
  uint32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string merge_where = fmt::format("{}[{}]", merges_where, i);
    // The old merges.txt header line, which the library skips without counting it as a rank.
    if (merges[i].is_string() && merges[i].get<std::string>().starts_with("#version")) continue;
    auto [left, right] = merge_parts(merges[i], merge_where);
    auto id = [&](const std::string& token) {
      std::optional<int32_t> found = id_of(token);
      if (!found) fail("{}: {} is not in the vocab", merge_where, nlohmann::json(token).dump());
      return *found;
    };
    // A pair listed twice keeps its last rank, as the library's map does.
    merges_[pair_key(id(left), id(right))] = Merge{rank++, id(left + right)};
  }

  const nlohmann::json& unk = model.contains("unk_token") ? model["unk_token"] : nlohmann::json();
  if (!unk.is_null()) {
    if (!unk.is_string()) fail("{} is {}, expected a string", json_member(where, "unk_token"), json_excerpt(unk));
    unk_id_ = id_of(unk.get<std::string>());
    if (!unk_id_) fail("{} {} is not in the vocab", json_member(where, "unk_token"), unk.dump());
  }
}

std::optional<int32_t> BpeModel::id_of(std::string_view token) const {
  auto found = vocab_.find(token);
  if (found == vocab_.end()) return std::nullopt;
  return found->second;
}

const std::string* BpeModel::token_of(int32_t id) const {
  auto found = tokens_.find(id);
  return found == tokens_.end() ? nullptr : found->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  auto found = merges_.find(pair_key(left, right));
  return found == merges_.end() ? nullptr : &found->second;
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (std::optional<int32_t> whole = id_of(piece)) {
      ids.push_back(*whole);
      return;
    }
  }
  std::vector<Symbol> symbols;
  auto add = [&](int32_t id) {
    const auto index = static_cast<int64_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, false});
  };
  // Characters outside the vocabulary become unk_token (one for a run with fuse_unk); the pending one is
  // added when a known character or the end comes, and (as in the library) not before byte_fallback tokens.
  std::optional<int32_t> pending_unk;
  for (size_t pos = 0; pos < piece.size();) {
    const std::string_view character = piece.substr(pos, utf8_char_length(piece, pos));
    pos += character.size();
    if (std::optional<int32_t> id = id_of(character)) {
      if (pending_unk) add(*std::exchange(pending_unk, std::nullopt));
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      if (std::optional<std::vector<int32_t>> bytes = byte_fallback_ids(*this, character)) {
        for (int32_t id : *bytes) add(id);
        continue;
      }
    }
    if (unk_id_ && !(pending_unk && fuse_unk_)) {
      if (pending_unk) add(*pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk) add(*pending_unk);
  merge_all(symbols, [this](int32_t left, int32_t right) { return find_merge(left, right); });
  for (const Symbol& symbol : symbols) {
    if (!symbol.removed) ids.push_back(symbol.id);
  }
}

}  // namespace strata
