#include "ckpt/stored_tensors.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/json_file.h"

namespace strata {

using json = nlohmann::json;

json index_to_json(const TensorIndex& index) {
  json tensors = json::object();
  for (const auto& [name, tensor] : index) {
    json pieces = json::array();
    for (const StoredPiece& piece : tensor.pieces) {
      pieces.push_back({{"file", piece.file}, {"key", piece.key}, {"offsets", piece.box.offsets},
                        {"lengths", piece.box.lengths}});
    }
    tensors[name] = {{"shape", tensor.shape}, {"dtype", std::string(safetensors_dtype_name(tensor.dtype))},
                     {"pieces", pieces}};
  }
  return tensors;
}

namespace {

std::vector<int64_t> dims(const json& value, const std::string& what, const std::function<void(std::string)>& bad) {
  if (!value.is_array()) bad(fmt::format("{} is not an array", what));
  std::vector<int64_t> result;
  for (const json& item : value) {
    if (!item.is_number_integer() || item.get<int64_t>() < 0) {
      bad(fmt::format("{} holds {}, not a non-negative integer", what, json_excerpt(item)));
    }
    result.push_back(item.get<int64_t>());
  }
  return result;
}

}  // namespace

TensorIndex index_from_json(const json& tensors, const std::vector<std::string>& files, const std::string& source) {
  if (!tensors.is_object()) fail("'{}': \"tensors\" is not an object", source);
  TensorIndex index;
  for (const auto& item : tensors.items()) {
    // Named, not a structured binding: clang before 16 cannot capture one in a lambda (scripts/fuzz.sh).
    const std::string& name = item.key();
    const json& entry = item.value();
    auto bad = [&](const std::string& what) { fail("'{}': tensor '{}': {}", source, name, what); };
    if (!entry.is_object() || !entry.contains("shape") || !entry.contains("dtype") || !entry.contains("pieces")) {
      bad("needs \"shape\", \"dtype\" and \"pieces\"");
    }
    StoredTensor tensor;
    tensor.shape = dims(entry["shape"], "\"shape\"", bad);
    if (!entry["dtype"].is_string() || !parse_safetensors_dtype(entry["dtype"].get<std::string>(), &tensor.dtype)) {
      bad(fmt::format("unsupported \"dtype\" {}", json_excerpt(entry["dtype"])));
    }
    if (!entry["pieces"].is_array()) bad("\"pieces\" is not an array");
    int64_t covered = 0;
    for (const json& item : entry["pieces"]) {
      if (!item.is_object() || !item.contains("file") || !item["file"].is_string() || !item.contains("key") ||
          !item["key"].is_string() || !item.contains("offsets") || !item.contains("lengths")) {
        bad(fmt::format("piece {} needs \"file\", \"key\", \"offsets\" and \"lengths\"", json_excerpt(item)));
      }
      StoredPiece piece{item["file"].get<std::string>(), item["key"].get<std::string>(),
                        {dims(item["offsets"], "a piece's \"offsets\"", bad),
                         dims(item["lengths"], "a piece's \"lengths\"", bad)}};
      if (std::find(files.begin(), files.end(), piece.file) == files.end()) {
        bad(fmt::format("piece '{}' is in '{}', which is not one of the checkpoint's files", piece.key, piece.file));
      }
      if (!box_within(piece.box, tensor.shape)) {
        bad(fmt::format("piece '{}' in '{}' covers {}, outside the tensor's {}", piece.key, piece.file,
                        box_str(piece.box), shape_str(tensor.shape)));
      }
      for (const StoredPiece& other : tensor.pieces) {
        if (piece.box.numel() > 0 && other.box.numel() > 0 && intersect(piece.box, other.box)) {
          bad(fmt::format("pieces '{}' in '{}' ({}) and '{}' in '{}' ({}) overlap", other.key, other.file,
                          box_str(other.box), piece.key, piece.file, box_str(piece.box)));
        }
      }
      covered += piece.box.numel();
      tensor.pieces.push_back(std::move(piece));
    }
    if (covered != shape_numel(tensor.shape)) {
      bad(fmt::format("its pieces cover {} of its {} elements {}: pieces are missing", covered,
                      shape_numel(tensor.shape), shape_str(tensor.shape)));
    }
    index.emplace(name, std::move(tensor));
  }
  return index;
}

}  // namespace strata
