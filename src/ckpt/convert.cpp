#include "ckpt/convert.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>

#include "ckpt/training_checkpoint.h"
#include "core/error.h"
#include "parallel/parameter_placement.h"

namespace strata {

namespace fs = std::filesystem;

// Every parallel dimension's degree by its name, and "vs" (virtual stages).
CheckpointLayout parse_checkpoint_layout(const std::string& text) {
  std::map<std::string, int> degrees;
  std::string known;
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    degrees[dimension.name] = 1;
    known += dimension.name + "=N, ";
  }
  degrees["vs"] = 1;
  known += "vs=N";
  std::map<std::string, bool> seen;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    const size_t equals = part.find('=');
    const std::string key = part.substr(0, equals);
    if (equals == std::string::npos || !degrees.count(key)) {
      fail("--layout '{}': '{}' is not one of {}", text, part, known);
    }
    if (seen[key]) fail("--layout '{}': '{}' is given twice", text, key);
    seen[key] = true;
    const std::string value = part.substr(equals + 1);
    int number = 0;
    auto [at, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (error != std::errc() || at != value.data() + value.size() || number < 1) {
      fail("--layout '{}': {} must be a positive integer, got '{}'", text, key, value);
    }
    degrees.at(key) = number;
    begin = end + 1;
  }
  const int virtual_stages = degrees.at("vs");
  degrees.erase("vs");
  return {MeshShape(degrees), virtual_stages};
}

fs::path convert_training_checkpoint(const Checkpoint& source, const fs::path& out, const CheckpointLayout& layout) {
  if (has_checkpoints(out)) fail("'{}' already holds checkpoints: convert into a new directory", out.string());
  TrainingCheckpoint state = read_training_checkpoint(source);
  const std::vector<ParamSpec> specs = model_param_specs(state.model);
  std::vector<size_t> every(specs.size());
  std::iota(every.begin(), every.end(), size_t{0});
  check_training_tensors(source, specs, every);  // before anything is written
  MeshPlacements placements;
  try {
    placements = place_parameters(layout.mesh, {.model = state.model, .specs = specs,
                                                .parts_per_stage = layout.virtual_stages});
  } catch (const Error& error) {
    fail("--layout: {}", error.what());
  }
  const std::vector<ShardPiece> pieces = checkpoint_pieces(specs, layout.mesh, placements);
  state.layout = {{"virtual_stages", layout.virtual_stages}, {"converted_from", source.dir().string()}};
  for (const MeshExtent& extent : layout.mesh.extents()) state.layout[extent.dimension] = extent.degree;
  const fs::path temp_dir = begin_checkpoint(out, state.step);
  try {
    for (int rank = 0; rank < layout.mesh.size(); ++rank) {
      TensorMap written;
      for (const ShardPiece& piece : pieces) {
        if (piece.writer != rank) continue;
        for (const std::string& prefix : kTrainingTensorPrefixes) {
          const std::string name = prefix + specs[piece.param].name;
          Tensor box = Tensor::empty(piece.box.lengths, DType::F32);
          source.read(name, piece.box, box, std::vector<int64_t>(box.shape().size(), 0));
          written[prefix + piece.key] = box;
        }
      }
      if (!written.empty()) write_safetensors(temp_dir / rank_file(rank), written);
    }
  } catch (...) {
    abandon_checkpoint(out, state.step);
    throw;
  }
  std::vector<std::string> files;
  const TensorIndex index = training_index(specs, pieces, files);
  return commit_checkpoint(out, state.step, files, index, training_metadata(state));
}

}  // namespace strata
