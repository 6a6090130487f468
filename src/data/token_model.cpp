#include "data/token_model.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/bpe_model.h"
#include "data/unigram_model.h"

namespace strata {

std::optional<std::vector<int32_t>> byte_fallback_ids(const TokenModel& model, std::string_view text) {
  std::vector<int32_t> ids;
  for (char byte : text) {
    std::optional<int32_t> id = model.id_of(fmt::format("<0x{:02X}>", static_cast<unsigned char>(byte)));
    if (!id) return std::nullopt;
    ids.push_back(*id);
  }
  return ids;
}

std::unique_ptr<TokenModel> read_token_model(const nlohmann::json& model, std::string_view where) {
  const std::string type = json_string(model, "type", where);
  if (type == "BPE") return std::make_unique<BpeModel>(model, where);
  if (type == "Unigram") return std::make_unique<UnigramModel>(model, where);
  fail("{} is \"{}\": this build reads the models BPE and Unigram", json_member(where, "type"), type);
}

}  // namespace strata
