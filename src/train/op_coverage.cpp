#include "train/op_coverage.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "model/family.h"
#include "train/trainer.h"

namespace strata {

namespace {

std::string route_text(const std::optional<Route>& route) {
  return route ? std::string(route_name(*route)) : std::string("missing");
}

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::vector<std::string> texts;
  for (const Shape& shape : shapes) texts.push_back(shape_str(shape));
  return fmt::format("{}", fmt::join(texts, " "));
}

// What a decomposition runs, "into a, b (emulated)" (the parts' routes where they are not native).
std::string parts_text(const std::vector<CoveragePart>& parts) {
  std::vector<std::string> texts;
  for (const CoveragePart& part : parts) {
    texts.push_back(part.route == Route::Native ? part.op : fmt::format("{} ({})", part.op, route_text(part.route)));
  }
  return texts.empty() ? "" : fmt::format("into {}", fmt::join(texts, ", "));
}

std::string route_detail(Route route, const std::vector<CoveragePart>& parts) {
  if (route == Route::Decomposed) return parts.empty() ? "decomposed" : fmt::format("decomposed {}", parts_text(parts));
  return route == Route::Reference ? "ref fallback" : std::string(route_name(route));
}

std::string percent(double share) { return fmt::format("{:.2f}%", 100.0 * share); }

// Counts the runs of a step by (op, dtype, shapes, route), resolving each (op, dtype) once.
class Tally {
 public:
  Tally(const std::string& backend, const std::string& device)
      : dispatcher_(get_backend(backend, device), get_backend("ref"), FallbackPolicy::Allow) {}

  void add(const std::string& op, const Metas& inputs, const Attrs& attrs, int64_t count) {
    if (count <= 0) return;
    const OpSchema& schema = OpRegistry::global().get(op);
    const DType dtype = inputs.at(schema.dtype_input).dtype;
    // As the executor compiles a node: the dtype of the selecting input picks the kernel.
    const Route route = dispatcher_.resolve(op, dtype).route;
    std::vector<Shape> shapes;
    for (const TensorMeta& meta : inputs) shapes.push_back(meta.shape);
    CoverageRow& row = rows_[{op, dtype, shapes, route}];
    if (row.count == 0) {
      row.op = op;
      row.dtype = dtype;
      row.shapes = shapes;
      row.route = route;
      if (route == Route::Decomposed) {
        for (const std::string& part : schema.decomposes_into) {
          row.parts.push_back({part, dispatcher_.route_if_any(part, dtype)});
        }
      }
    }
    row.count += count;
    row.flops += static_cast<double>(count) * OpRegistry::global().cost(op, inputs, attrs).flops;
    if (route == Route::Reference) {
      const TransferTotals copies = copies_of_route(route, dispatcher_.backend().device(), inputs,
                                                    OpRegistry::global().infer(op, inputs, attrs));
      transfers_ += count * copies.count;
      transfer_bytes_ += static_cast<double>(count) * static_cast<double>(copies.bytes);
    }
  }

  std::string device() const { return dispatcher_.backend().device().name(); }
  int64_t transfers() const { return transfers_; }
  double transfer_bytes() const { return transfer_bytes_; }

  std::vector<CoverageRow> rows() const {
    std::vector<CoverageRow> rows;
    for (const auto& [key, row] : rows_) rows.push_back(row);
    return rows;
  }

 private:
  Dispatcher dispatcher_;
  std::map<std::tuple<std::string, DType, std::vector<Shape>, Route>, CoverageRow> rows_;
  int64_t transfers_ = 0;
  double transfer_bytes_ = 0;
};

}  // namespace

ConfigCoverage config_op_coverage(const TrainConfig& config) {
  ConfigCoverage coverage;
  coverage.family = config.model.family;
  coverage.backend = config.backend;
  coverage.precision = std::string(dtype_name(config.precision_policy().low));
  coverage.batch = config.batch_size;
  coverage.seq = config.model.block_size;
  coverage.micro_batches = config.accumulation_steps();
  Tally tally(config.backend, config.device);

  // The training graph, once per micro-batch.
  const ModelGraph model = build_rank_model(config, /*training=*/true);
  const Graph& graph = model.graph;
  for (const Node& node : graph.nodes()) {
    Metas inputs;
    for (int input : node.inputs) inputs.push_back(graph.value(input).meta);
    tally.add(node.op, inputs, node.attrs, coverage.micro_batches);
  }

  // The step's eager ops on the f32 gradients and master weights (one process): accumulation over
  // micro-batches (the tied embedding's head copy is collected apart and joined once), fp16's
  // unscaling, the exact gradient norm and AdamW (clipping's factor inside), which in low precision also
  // writes the copy of each parameter the graph casts (one process keeps them all).
  const std::string tied = model_family(config.model).tied_embedding(config.model);
  const std::vector<ParamSpec> specs = model_param_specs(config.model);
  const int64_t accumulations = coverage.micro_batches - 1;
  const bool unscale = config.precision_policy().low == DType::F16;
  const Attrs adamw{{"lr", config.lr},        {"beta1", config.beta1},
                    {"beta2", config.beta2},  {"eps", config.adam_eps},
                    {"weight_decay", config.weight_decay}, {"step", int64_t{1}},
                    {"grad_scale", 1.0}};
  const DType low = config.precision_policy().low;
  std::set<int> cast;  // parameters (or the head's copy) the graph casts to `low`
  if (low != DType::F32) {
    for (const ParameterCast& found : parameter_casts(model, low)) cast.insert(found.param);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorMeta param = graph.value(model.params[i]).meta;
    const bool head_copy = specs[i].name == tied && model.head_copy >= 0;
    tally.add("add", {param, param}, {}, accumulations * (head_copy ? 2 : 1) + (head_copy ? 1 : 0));
    if (unscale) tally.add("scale", {param}, {{"factor", 1.0}}, 1);
    tally.add("square_sum_exact", {param}, {}, 1);
    if (cast.count(model.params[i]) || (head_copy && cast.count(model.head_copy))) {
      Attrs with_copy = adamw;
      with_copy.set("copy_dtype", std::string(dtype_name(low)));
      tally.add("adamw_with_copy", {param, param, param, param}, with_copy, 1);
    } else {
      tally.add("adamw", {param, param, param, param}, adamw, 1);
    }
  }

  coverage.rows = tally.rows();
  coverage.device = tally.device();
  coverage.transfers_per_step = tally.transfers();
  coverage.transfer_bytes_per_step = tally.transfer_bytes();
  for (const CoverageRow& row : coverage.rows) coverage.step_flops += row.flops;
  for (CoverageRow& row : coverage.rows) row.share = coverage.step_flops > 0 ? row.flops / coverage.step_flops : 0;
  std::stable_sort(coverage.rows.begin(), coverage.rows.end(), [](const CoverageRow& a, const CoverageRow& b) {
    return std::tie(b.flops, b.count) < std::tie(a.flops, a.count);
  });

  std::map<std::tuple<std::string, DType, Route>, CoverageGap> gaps;
  for (const CoverageRow& row : coverage.rows) {
    if (row.route == Route::Native) continue;
    CoverageGap& gap = gaps[{row.op, row.dtype, row.route}];
    gap.op = row.op;
    gap.dtype = row.dtype;
    gap.route = row.route;
    gap.parts = row.parts;
    gap.count += row.count;
    gap.share += row.share;
  }
  for (const auto& [key, gap] : gaps) coverage.gaps.push_back(gap);
  std::stable_sort(coverage.gaps.begin(), coverage.gaps.end(), [](const CoverageGap& a, const CoverageGap& b) {
    return std::tie(b.share, b.count) < std::tie(a.share, a.count);
  });
  return coverage;
}

std::string coverage_verdict(const ConfigCoverage& coverage) {
  if (coverage.quick_switch()) {
    return fmt::format("quick switch: every op of the step runs natively on backend '{}' in {}{}", coverage.backend,
                       coverage.precision,
                       coverage.device == "host" ? "" : fmt::format(", no copies between the host and {}", coverage.device));
  }
  double share = 0;
  std::map<Route, std::vector<std::string>> by_route;
  for (const CoverageGap& gap : coverage.gaps) {
    share += gap.share;
    std::string text = fmt::format("{} {} {} ({}x)", gap.op, dtype_name(gap.dtype), percent(gap.share), gap.count);
    if (gap.route == Route::Decomposed && !gap.parts.empty()) text += fmt::format(" {}", parts_text(gap.parts));
    by_route[gap.route].push_back(text);
  }
  std::vector<std::string> groups;
  for (const auto& [route, texts] : by_route) {
    const std::string heading = route == Route::Emulated     ? "emulated (computed in a wider type)"
                                : route == Route::Decomposed ? "decomposed"
                                                             : "ref fallback";
    groups.push_back(fmt::format("{}: {}", heading, fmt::join(texts, ", ")));
  }
  std::string transfers;
  if (coverage.transfers_per_step > 0) {
    transfers = fmt::format("; the ref fallbacks copy {} tensors ({:.4g} MB) per step between the host and {}",
                            coverage.transfers_per_step, coverage.transfer_bytes_per_step / 1e6, coverage.device);
  }
  return fmt::format("needs work: {} of the step's FLOPs ({} op types) run off native kernels on backend '{}' in {}; {}{}",
                     percent(share), coverage.gaps.size(), coverage.backend, coverage.precision,
                     fmt::join(groups, "; "), transfers);
}

std::string coverage_text(const ConfigCoverage& coverage) {
  std::string text = fmt::format(
      "ops of one training step of this {} model on backend '{}', precision {}: the training graph ({} x {} tokens) "
      "{} time(s), then the optimizer; {:.4g} GFLOP\n(emulated: the backend's kernel computes in a wider type and rounds "
      "back; decomposed: the op runs as the ops listed (their route when not native); ref fallback: backend 'ref' runs "
      "it)\n",
      coverage.family, coverage.backend, coverage.precision, coverage.batch, coverage.seq, coverage.micro_batches,
      coverage.step_flops / 1e9);
  size_t op_width = 2, shape_width = 6;
  for (const CoverageRow& row : coverage.rows) {
    op_width = std::max(op_width, row.op.size());
    shape_width = std::max(shape_width, shapes_text(row.shapes).size());
  }
  text += fmt::format("{:>8} {:>6}  {:<{}}  {:<5}  {:<{}}  {}\n", "share", "count", "op", op_width, "dtype", "shapes",
                      shape_width, "route");
  for (const CoverageRow& row : coverage.rows) {
    text += fmt::format("{:>8} {:>6}  {:<{}}  {:<5}  {:<{}}  {}\n", percent(row.share), row.count, row.op, op_width,
                        dtype_name(row.dtype), shapes_text(row.shapes), shape_width,
                        route_detail(row.route, row.parts));
  }
  text += "verdict: " + coverage_verdict(coverage) + "\n";
  return text;
}

nlohmann::json coverage_json(const ConfigCoverage& coverage) {
  auto parts_json = [](const std::vector<CoveragePart>& parts) {
    nlohmann::json into = nlohmann::json::array();
    for (const CoveragePart& part : parts) into.push_back({{"op", part.op}, {"route", route_text(part.route)}});
    return into;
  };
  nlohmann::json ops = nlohmann::json::array();
  for (const CoverageRow& row : coverage.rows) {
    nlohmann::json entry{{"op", row.op},
                         {"dtype", std::string(dtype_name(row.dtype))},
                         {"shapes", row.shapes},
                         {"route", std::string(route_name(row.route))},
                         {"count", row.count},
                         {"flops", row.flops},
                         {"share", row.share}};
    if (row.route == Route::Decomposed) entry["into"] = parts_json(row.parts);
    ops.push_back(std::move(entry));
  }
  nlohmann::json gaps = nlohmann::json::array();
  for (const CoverageGap& gap : coverage.gaps) {
    nlohmann::json entry{{"op", gap.op},
                         {"dtype", std::string(dtype_name(gap.dtype))},
                         {"route", std::string(route_name(gap.route))},
                         {"count", gap.count},
                         {"share", gap.share}};
    if (gap.route == Route::Decomposed) entry["into"] = parts_json(gap.parts);
    gaps.push_back(std::move(entry));
  }
  return {{"family", coverage.family},
          {"backend", coverage.backend},
          {"device", coverage.device},
          {"transfers_per_step", {{"tensors", coverage.transfers_per_step}, {"bytes", coverage.transfer_bytes_per_step}}},
          {"reference", "ref"},
          {"precision", coverage.precision},
          {"batch", coverage.batch},
          {"seq", coverage.seq},
          {"micro_batches", coverage.micro_batches},
          {"step_flops", coverage.step_flops},
          {"ops", ops},
          {"verdict",
           {{"quick_switch", coverage.quick_switch()}, {"text", coverage_verdict(coverage)}, {"needs_work", gaps}}}};
}

}  // namespace strata
