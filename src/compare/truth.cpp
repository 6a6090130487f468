#include "compare/truth.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backends/backends.h"
#include "core/error.h"

namespace strata {

namespace {

constexpr const char* kSeedInput = "d_loss";  // the backward pass's seed: 1 in the seed's units
constexpr int kRebuildDepth = 3;

// f64 values times `factor` (floating tensors); integers (token ids) as they are.
Tensor in_seed_units(const Tensor& tensor, double factor) {
  if (!is_floating(tensor.dtype())) return tensor;
  Tensor wide = tensor.to(DType::F64);
  if (factor != 1) {
    double* values = wide.data<double>();
    for (int64_t i = 0; i < wide.numel(); ++i) values[i] *= factor;
  }
  return wide;
}

Tensor magnitudes(const Tensor& tensor) {
  if (!is_floating(tensor.dtype())) return tensor;
  Tensor copy = tensor.to(DType::F64);
  double* values = copy.data<double>();
  for (int64_t i = 0; i < copy.numel(); ++i) values[i] = std::abs(values[i]);
  return copy;
}

double max_abs(const Tensor& tensor) {
  const Tensor wide = tensor.to(DType::F64);
  double largest = 0;
  for (int64_t i = 0; i < wide.numel(); ++i) largest = std::max(largest, std::abs(wide.data<double>()[i]));
  return largest;
}

// Side against truth, element by element, by the bounds.
void measure(const Tensor& side, const Tensor& truth, const Tensor& bounds, SideJudgement& judgement) {
  const double* s = side.data<double>();
  const double* t = truth.data<double>();
  const double* b = bounds.data<double>();
  for (int64_t i = 0; i < side.numel(); ++i) {
    judgement.truth_scale = std::max(judgement.truth_scale, std::abs(t[i]));
    if (!std::isfinite(t[i]) && (s[i] == t[i] || (std::isnan(s[i]) && std::isnan(t[i])))) continue;
    const double error = std::abs(s[i] - t[i]);
    const double ratio = std::isnan(error) ? INFINITY : (b[i] > 0 ? error / b[i] : (error > 0 ? INFINITY : 0));
    judgement.max_error = std::max(judgement.max_error, std::isnan(error) ? INFINITY : error);
    if (ratio > judgement.ratio || (i == 0 && judgement.ratio == 0)) {
      judgement.ratio = ratio;
      judgement.worst = i;
      judgement.side_at_worst = s[i];
      judgement.truth_at_worst = t[i];
      judgement.bound_at_worst = b[i];
    }
  }
}

}  // namespace

TruthJudge::TruthJudge(bool candidate_nodes)
    : ref_(make_dispatcher("ref", FallbackPolicy::Allow)), candidate_nodes_(candidate_nodes) {}
TruthJudge::~TruthJudge() = default;

void TruthJudge::add_graph_input(const std::string& name, const Tensor& value, bool side_b) {
  (side_b ? b_ : a_).graph_inputs[name] = value;
}

void TruthJudge::add_baseline(const CapturedTensor& a) {
  for (const std::string& input : a.inputs) {
    if (auto found = a_.held.find(input); found != a_.held.end()) ++found->second.readers;
  }
  a_.held[a.name] = Held{a.op, a.attrs, a.inputs, a.output, a.tensor, a.factor};
}

void TruthJudge::add_candidate(const CapturedTensor& b) {
  b_.held[b.name] = Held{b.op, b.attrs, b.inputs, b.output, b.tensor, b.factor};
  if (auto found = a_.held.find(b.name); found != a_.held.end()) found->second.given_by_b = true;
}

bool TruthJudge::can_judge(const std::string& name) const {
  auto found = a_.held.find(name);
  return found != a_.held.end() && b_.held.count(name) && op_bound_model(found->second.op) != nullptr &&
         op_bound_model(node_of(name, true).op) != nullptr;
}

const TruthJudge::Held& TruthJudge::node_of(const std::string& name, bool side_b) const {
  return side_b && candidate_nodes_ ? b_.held.at(name) : a_.held.at(name);
}

const Attrs* TruthJudge::attrs_of(const std::string& name) const {
  auto found = a_.held.find(name);
  return found == a_.held.end() ? nullptr : &found->second.attrs;
}

const Tensor* TruthJudge::stored(const std::string& name, bool side_b) const {
  const Side& side = side_b ? b_ : a_;
  if (auto held = side.held.find(name); held != side.held.end() && held->second.tensor.defined()) return &held->second.tensor;
  if (auto input = side.graph_inputs.find(name); input != side.graph_inputs.end()) return &input->second;
  if (auto input = a_.graph_inputs.find(name); input != a_.graph_inputs.end()) return &input->second;
  return nullptr;
}

Tensor TruthJudge::value_of(const std::string& name, bool side_b, int depth, std::vector<std::string>& rebuilt) {
  if (name == kSeedInput) {
    Tensor one = Tensor::empty({}, DType::F64);
    one.data<double>()[0] = 1;
    return one;
  }
  const Side& side = side_b ? b_ : a_;
  if (auto held = side.held.find(name); held != side.held.end() && held->second.tensor.defined()) {
    return in_seed_units(held->second.tensor, held->second.factor);
  }
  if (const Tensor* input = stored(name, side_b)) return in_seed_units(*input, 1);
  // Side b lacks it (a value one layout sums where the other does not capture it): side a's node re-run on b's values.
  auto node = a_.held.find(name);
  if (!side_b || node == a_.held.end() || depth >= kRebuildDepth || !op_bound_model(node->second.op)) {
    fail("side {} has no '{}'", side_b ? "b" : "a", name);
  }
  Tensors inputs;
  for (const std::string& input : node->second.inputs) inputs.push_back(value_of(input, true, depth + 1, rebuilt));
  rebuilt.push_back(name);
  return rerun(node->second, inputs).at(static_cast<size_t>(node->second.output));
}

Tensors TruthJudge::rerun(const Held& node, const Tensors& inputs) {
  Tensors outputs = ref_->call(node.op, inputs, node.attrs);
  for (Tensor& output : outputs) output = in_seed_units(output, 1);
  return outputs;
}

SideJudgement TruthJudge::judge(const std::string& name, bool side_b) {
  try {
    return judge_node(node_of(name, side_b), (side_b ? b_ : a_).held.at(name), side_b);
  } catch (const Error& error) {
    SideJudgement judgement;
    judgement.unjudged_why = error.what();
    return judgement;
  }
}

SideJudgement TruthJudge::judge_node(const Held& node, const Held& output, bool side_b) {
  SideJudgement judgement;
  Tensors inputs, absolute;
  Metas read;  // as the side's kernel read them
  for (const std::string& input : node.inputs) {
    inputs.push_back(value_of(input, side_b, 0, judgement.rebuilt));
    absolute.push_back(magnitudes(inputs.back()));
    const Tensor* kept = stored(input, side_b);
    if (!kept) kept = stored(input, false);
    // A layout's partial sums are assembled in f64, which no kernel read: those count as the output's dtype.
    const DType dtype = !kept ? inputs.back().dtype() : kept->dtype() == DType::F64 ? output.tensor.dtype() : kept->dtype();
    read.push_back({inputs.back().shape(), dtype});
  }
  const Tensor truth = rerun(node, inputs).at(static_cast<size_t>(node.output));
  const Tensor magnitude = rerun(node, absolute).at(static_cast<size_t>(node.output));
  if (output.tensor.numel() != truth.numel()) {
    fail("the re-run made {} elements, the side {}", truth.numel(), output.tensor.numel());
  }
  judgement.terms = bound_terms(node.op, *op_bound_model(node.op), read, node.attrs, node.output,
                                output.tensor.dtype(), output.factor);
  measure(in_seed_units(output.tensor, output.factor), truth, element_bounds(judgement.terms, truth, magnitude), judgement);
  judgement.judged = true;
  return judgement;
}

void TruthJudge::done(const std::string& name) {
  auto found = a_.held.find(name);
  if (found == a_.held.end()) return;
  for (const std::string& input : found->second.inputs) {
    auto read = a_.held.find(input);
    if (read != a_.held.end() && --read->second.readers == 0 && read->second.given_by_b) release(input);
  }
  if (found->second.readers == 0) release(name);
}

// Side a's node stays (side b may need it rebuilt); the values go.
void TruthJudge::release(const std::string& name) {
  a_.held.at(name).tensor = Tensor();
  if (auto held = b_.held.find(name); held != b_.held.end()) held->second.tensor = Tensor();
}

std::string TruthJudge::describe_inputs(const std::string& name) const {
  std::string text;
  auto found = a_.held.find(name);
  if (found == a_.held.end()) return text;
  auto figure = [](const Side& side, const std::string& input) {
    auto held = side.held.find(input);
    if (held != side.held.end() && held->second.tensor.defined()) {
      return fmt::format("{:.4g}", max_abs(held->second.tensor) * std::abs(held->second.factor));
    }
    auto graph = side.graph_inputs.find(input);
    return graph != side.graph_inputs.end() ? fmt::format("{:.4g}", max_abs(graph->second)) : std::string("-");
  };
  for (const std::string& input : found->second.inputs) {
    const Tensor* any = stored(input, false);
    text += fmt::format("  input {} {} {}: max|a| {}, max|b| {}\n", input, any ? shape_str(any->shape()) : "?",
                        any ? dtype_name(any->dtype()) : "?", figure(a_, input), figure(b_, input));
  }
  return text;
}

}  // namespace strata
