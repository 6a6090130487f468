#pragma once
// A checkpoint's global tensors and where their pieces are stored. Each
// global tensor (a parameter or an optimizer moment, by its HuggingFace name)
// has a shape, a dtype and pieces: boxes of it, each a tensor of its own in
// one of the checkpoint's safetensors files. The pieces of a tensor cover it
// exactly once, so any layout can read any box of it from the pieces that
// overlap that box. The index is the manifest's "tensors" object:
//   {"<name>": {"shape": [...], "dtype": "F32",
//               "pieces": [{"file": "...", "key": "...", "offsets": [...], "lengths": [...]}]}}
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor_box.h"

namespace strata {

struct StoredPiece {
  std::string file;  // in the checkpoint directory
  std::string key;   // the safetensors tensor holding it, of shape box.lengths
  TensorBox box;     // in the global tensor
};

struct StoredTensor {
  Shape shape;
  DType dtype = DType::F32;
  std::vector<StoredPiece> pieces;
};

using TensorIndex = std::map<std::string, StoredTensor>;

nlohmann::json index_to_json(const TensorIndex& index);
// Parses and checks an index read from `source` (named in every error, with
// the tensor): shapes and boxes well formed, every piece inside its tensor and
// in a file of `files`, no two pieces of a tensor overlapping, and together
// covering all of it.
TensorIndex index_from_json(const nlohmann::json& tensors, const std::vector<std::string>& files,
                            const std::string& source);

}  // namespace strata
