#include "compare/rank_dump.h"

#include <algorithm>
#include <charconv>
#include <list>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "core/json_file.h"
#include "parallel/parallel_dimension.h"
#include "parallel/value_assembly.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kEntriesKey = "strata.capture";

// A file's metadata keys for its rank's place along a dimension: "strata.tp_rank", "strata.tp_degree".
std::string rank_key(const std::string& dimension) { return "strata." + dimension + "_rank"; }
std::string degree_key(const std::string& dimension) { return "strata." + dimension + "_degree"; }

// The dimensions whose passes give ranks different parts of the graph (the others hold replicas).
std::vector<std::string> splitting_dimensions() {
  std::vector<std::string> names;
  for (const ParallelDimension& dimension : dimensions_innermost_first()) {
    if (dimension.pass) names.push_back(dimension.name);
  }
  return names;
}

std::string_view kind_name(ValueLayout::Kind kind) {
  switch (kind) {
    case ValueLayout::Kind::Whole: return "whole";
    case ValueLayout::Kind::Split: return "split";
    case ValueLayout::Kind::Partial: return "partial";
  }
  return "?";
}

ValueLayout::Kind parse_kind(const std::string& name, const std::string& where) {
  for (ValueLayout::Kind kind : {ValueLayout::Kind::Whole, ValueLayout::Kind::Split, ValueLayout::Kind::Partial}) {
    if (kind_name(kind) == name) return kind;
  }
  fail("{}: unknown layout '{}'", where, name);
}

// The backward pass's tensors: a backward node's outputs and the parameters' gradients.
bool backward_tensor(const CapturedTensor& tensor) {
  return tensor.op == kParamGradOp || tensor.name.find(".backward.") != std::string::npos;
}

struct DumpedTensor {
  CapturedTensor tensor;
  int part = 0;
  int order = 0;  // in its part's execution
};

}  // namespace

struct RankGraphDump::State {
  fs::path file;
  std::map<std::string, std::string> place;  // the rank's coordinate and degree along each splitting dimension
  ModelConfig model;
  std::map<int, GraphCapture> parts;  // per model part the rank runs
  std::vector<DumpedTensor> captured;
};

RankGraphDump::RankGraphDump(Trainer& trainer, const TrainConfig& config, fs::path dir)
    : state_(std::make_unique<State>()) {
  const MeshCoordinates& at = trainer.mesh_coordinates();
  const std::vector<std::string> splitting = splitting_dimensions();
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    const bool replica = std::find(splitting.begin(), splitting.end(), dimension.name) == splitting.end();
    if (replica && at.at(dimension.name) != 0) return;
  }
  state_->model = config.model;
  std::string name = "rank";
  for (const std::string& dimension : splitting) {
    name += fmt::format("-{}{}", dimension, at.at(dimension));
    state_->place[rank_key(dimension)] = std::to_string(at.at(dimension));
    state_->place[degree_key(dimension)] = std::to_string(trainer.mesh().degree(dimension));
  }
  state_->file = dir / (name + ".safetensors");
  State* state = state_.get();
  trainer.observe_first_micro_batch([state, &trainer](const Trainer::ObservedNode& observed) {
    auto found = state->parts.find(observed.part);
    if (found == state->parts.end()) {
      const int part = observed.part;
      CaptureSink keep = [state, part](CapturedTensor&& tensor) {
        const int order = static_cast<int>(state->captured.size());
        state->captured.push_back({std::move(tensor), part, order});
      };
      found = state->parts.emplace(part, GraphCapture(observed.model, state->model, keep)).first;
    }
    found->second.after_node(observed, trainer.backward_seed());
  });
}

RankGraphDump::~RankGraphDump() = default;

void RankGraphDump::write() const {
  if (state_->captured.empty()) return;
  fs::create_directories(state_->file.parent_path());
  TensorMap tensors;
  nlohmann::json entries = nlohmann::json::array();
  for (size_t i = 0; i < state_->captured.size(); ++i) {
    const DumpedTensor& dumped = state_->captured[i];
    const CapturedTensor& t = dumped.tensor;
    const std::string key = std::to_string(i);
    tensors[key] = t.tensor;
    entries.push_back({{"tensor", key},
                       {"name", t.name},
                       {"op", t.op},
                       {"dtype", dtype_name(t.dtype)},
                       {"precision", dtype_name(t.precision)},
                       {"factor", t.factor},
                       {"inputs", t.inputs},
                       {"layout", kind_name(t.layout.kind)},
                       {"dim", t.layout.dim},
                       {"parts", t.layout.parts},
                       {"group", t.layout.group},
                       {"part", dumped.part},
                       {"order", dumped.order}});
  }
  std::map<std::string, std::string> metadata = state_->place;
  metadata[kEntriesKey] = entries.dump();
  write_safetensors(state_->file, tensors, metadata);
}

namespace {

DumpedTensor read_entry(const SafetensorsReader& file, const nlohmann::json& entry, const std::string& where) {
  DumpedTensor dumped;
  CapturedTensor& t = dumped.tensor;
  t.name = json_string(entry, "name", where);
  t.op = json_string(entry, "op", where);
  t.dtype = parse_dtype(json_string(entry, "dtype", where));
  t.precision = parse_dtype(json_string(entry, "precision", where));
  t.factor = json_number(entry, "factor", where);
  t.inputs = json_required(entry, "inputs", where).get<std::vector<std::string>>();
  t.layout.kind = parse_kind(json_string(entry, "layout", where), where);
  t.layout.dim = static_cast<int64_t>(json_number(entry, "dim", where));
  t.layout.parts = static_cast<int64_t>(json_number(entry, "parts", where));
  t.layout.group = json_string(entry, "group", where);
  t.tensor = file.load(json_string(entry, "tensor", where));
  t.layout.shape = t.tensor.shape();
  dumped.part = static_cast<int>(json_number(entry, "part", where));
  dumped.order = static_cast<int>(json_number(entry, "order", where));
  return dumped;
}

// A rank's dump file: where the rank sits along each splitting dimension, and its tensors.
struct DumpFile {
  MeshCoordinates coordinates;
  std::map<std::string, int, std::less<>> degrees;
};

// A tensor whole from the pieces of the ranks running its model part: a split or partial value's
// from the ranks of its group, in their order there; a whole value is every rank's.
CapturedTensor whole_of(const std::string& name, std::vector<std::pair<const DumpFile*, DumpedTensor>> pieces,
                        size_t part_ranks) {
  if (pieces.size() != part_ranks) {
    fail("'{}': captured on {} of the {} ranks running its model part", name, pieces.size(), part_ranks);
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const auto& a, const auto& b) { return a.first->coordinates < b.first->coordinates; });
  CapturedTensor whole = pieces.front().second.tensor;
  const std::string& group = whole.layout.group;
  if (whole.layout.kind != ValueLayout::Kind::Whole) {
    const auto degree = pieces.front().first->degrees.find(group);
    if (degree == pieces.front().first->degrees.end()) fail("'{}': laid out over '{}', which no file names", name, group);
    std::stable_sort(pieces.begin(), pieces.end(), [&](const auto& a, const auto& b) {
      return a.first->coordinates.at(group) < b.first->coordinates.at(group);
    });
    for (size_t r = 0; r < pieces.size(); ++r) {
      if (pieces[r].first->coordinates.at(group) != static_cast<int>(r) || static_cast<int>(pieces.size()) != degree->second) {
        fail("'{}': its pieces are not one per rank of its '{}' group of {}", name, group, degree->second);
      }
    }
  }
  std::vector<Tensor> tensors;
  for (const auto& [file, piece] : pieces) tensors.push_back(piece.tensor.tensor);
  whole.tensor = assemble_value(name, tensors, whole.layout);
  if (whole.layout.kind == ValueLayout::Kind::Partial && whole.factor != 1.0) {
    double* values = whole.tensor.data<double>();  // summed in f64: the factor applies once
    for (int64_t i = 0; i < whole.tensor.numel(); ++i) values[i] *= whole.factor;
    whole.factor = 1.0;
  }
  whole.layout = ValueLayout{};
  whole.layout.shape = whole.tensor.shape();
  return whole;
}

}  // namespace

void assemble_rank_dumps(const fs::path& dir, const CaptureSink& sink) {
  using Pieces = std::vector<std::pair<const DumpFile*, DumpedTensor>>;
  std::map<std::string, std::map<int, Pieces>> by_name;  // name -> part -> pieces
  std::list<DumpFile> files;
  std::map<int, size_t> part_ranks;  // how many ranks run each model part
  if (!fs::is_directory(dir)) fail("{}: the layout run captured no graph tensors", dir.string());
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const SafetensorsReader file(entry.path());
    const std::string where = entry.path().string();
    auto meta = [&](const std::string& key) -> const std::string& {
      auto found = file.metadata().find(key);
      if (found == file.metadata().end()) fail("{}: no '{}' in its metadata", where, key);
      return found->second;
    };
    auto meta_count = [&](const std::string& key) {
      const std::string& text = meta(key);
      int value = -1;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size() || value < 0) {
        fail("{}: metadata '{}' is \"{}\", not a count", where, key, text);
      }
      return value;
    };
    DumpFile& dump = files.emplace_back();
    for (const std::string& dimension : splitting_dimensions()) {
      dump.coordinates[dimension] = meta_count(rank_key(dimension));
      dump.degrees[dimension] = meta_count(degree_key(dimension));
      const int first_files = files.front().degrees.at(dimension);
      if (dump.degrees[dimension] != first_files) {
        fail("{}: a '{}' group of {}, another file's is {}", where, dimension, dump.degrees[dimension], first_files);
      }
    }
    const nlohmann::json entries = parse_json(meta(kEntriesKey), where + " metadata");
    std::set<int> parts;
    for (size_t i = 0; i < entries.size(); ++i) {
      DumpedTensor dumped = read_entry(file, entries[i], fmt::format("{} entry {}", where, i));
      parts.insert(dumped.part);
      by_name[dumped.tensor.name][dumped.part].emplace_back(&dump, std::move(dumped));
    }
    for (int part : parts) ++part_ranks[part];
  }
  if (files.empty()) fail("{}: the layout run captured no graph tensors", dir.string());
  struct Ordered {
    std::tuple<int, int, int> key;  // forward by part, then backward from the last part
    CapturedTensor tensor;
  };
  std::vector<Ordered> whole;
  for (auto& [name, parts] : by_name) {
    std::vector<Tensor> terms;
    std::optional<Ordered> latest;  // where it is complete: the latest of its parts in execution order
    for (auto& [part, pieces] : parts) {
      const DumpedTensor& first = pieces.front().second;
      const bool backward = backward_tensor(first.tensor);
      const std::tuple<int, int, int> key{backward ? 1 : 0, backward ? -part : part, first.order};
      CapturedTensor tensor = whole_of(name, std::move(pieces), part_ranks.at(part));
      terms.push_back(tensor.tensor);
      if (!latest || key > latest->key) latest = Ordered{key, std::move(tensor)};
    }
    if (terms.size() > 1) {
      // A parameter's gradient from the model parts that use it (the tied embedding's): the terms summed.
      if (latest->tensor.op != kParamGradOp) fail("'{}': captured in {} model parts", name, terms.size());
      ValueLayout summed;
      summed.kind = ValueLayout::Kind::Partial;
      latest->tensor.tensor = assemble_value(name, terms, summed);
    }
    whole.push_back(std::move(*latest));
  }
  std::sort(whole.begin(), whole.end(), [](const Ordered& a, const Ordered& b) { return a.key < b.key; });
  for (Ordered& ordered : whole) sink(std::move(ordered.tensor));
}

}  // namespace strata
