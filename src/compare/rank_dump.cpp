#include "compare/rank_dump.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "core/json_file.h"
#include "parallel/value_assembly.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kEntriesKey = "strata.capture";
constexpr const char* kDegreeKey = "strata.tp_degree";
constexpr const char* kRankKey = "strata.tp_rank";

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
  TensorParallelRank tp;
  ModelConfig model;
  std::map<int, GraphCapture> parts;  // per model part the rank runs
  std::vector<DumpedTensor> captured;
};

RankGraphDump::RankGraphDump(Trainer& trainer, const TrainConfig& config, fs::path dir)
    : state_(std::make_unique<State>()) {
  if (trainer.data_parallel_rank() != 0) return;
  state_->tp = trainer.tensor_parallel_rank();
  state_->model = config.model;
  state_->file = dir / fmt::format("rank-tp{}-pp{}.safetensors", state_->tp.rank, trainer.pipeline_stage());
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
                       {"part", dumped.part},
                       {"order", dumped.order}});
  }
  write_safetensors(state_->file, tensors,
                    {{kEntriesKey, entries.dump()},
                     {kDegreeKey, std::to_string(state_->tp.degree)},
                     {kRankKey, std::to_string(state_->tp.rank)}});
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
  t.tensor = file.load(json_string(entry, "tensor", where));
  t.layout.shape = t.tensor.shape();
  dumped.part = static_cast<int>(json_number(entry, "part", where));
  dumped.order = static_cast<int>(json_number(entry, "order", where));
  return dumped;
}

// A tensor whole from its tensor-parallel ranks' pieces (all of one model part).
CapturedTensor whole_of(const std::string& name, std::vector<std::pair<int, DumpedTensor>> pieces, int degree) {
  std::sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (static_cast<int>(pieces.size()) != degree) {
    fail("'{}': captured on {} of the {} tensor-parallel ranks", name, pieces.size(), degree);
  }
  CapturedTensor whole = pieces.front().second.tensor;
  std::vector<Tensor> tensors;
  for (const auto& [rank, piece] : pieces) tensors.push_back(piece.tensor.tensor);
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
  std::map<std::string, std::map<int, std::vector<std::pair<int, DumpedTensor>>>> by_name;  // name -> part -> pieces
  std::optional<int> degree;
  if (!fs::is_directory(dir)) fail("{}: the layout run captured no graph tensors", dir.string());
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const SafetensorsReader file(entry.path());
    const std::string where = entry.path().string();
    auto meta = [&](const char* key) -> const std::string& {
      auto found = file.metadata().find(key);
      if (found == file.metadata().end()) fail("{}: no '{}' in its metadata", where, key);
      return found->second;
    };
    auto meta_count = [&](const char* key) {
      const std::string& text = meta(key);
      int value = -1;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size() || value < 0) {
        fail("{}: metadata '{}' is \"{}\", not a count", where, key, text);
      }
      return value;
    };
    const int rank = meta_count(kRankKey), file_degree = meta_count(kDegreeKey);
    if (degree && *degree != file_degree) fail("{}: a tensor-parallel group of {}, another file's is {}", where, file_degree, *degree);
    degree = file_degree;
    const nlohmann::json entries = parse_json(meta(kEntriesKey), where + " metadata");
    for (size_t i = 0; i < entries.size(); ++i) {
      DumpedTensor dumped = read_entry(file, entries[i], fmt::format("{} entry {}", where, i));
      by_name[dumped.tensor.name][dumped.part].emplace_back(rank, std::move(dumped));
    }
  }
  if (!degree) fail("{}: the layout run captured no graph tensors", dir.string());
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
      CapturedTensor tensor = whole_of(name, std::move(pieces), *degree);
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
