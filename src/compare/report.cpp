#include "compare/report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace strata {

namespace {

using json = nlohmann::json;

bool compared(const ComparedTensor& t) { return t.status == TensorStatus::Pass || t.status == TensorStatus::Fail; }

std::string dtypes(const ComparedTensor& t) {
  auto one = [](bool present, DType dtype) { return present ? std::string(dtype_name(dtype)) : std::string("-"); };
  return one(t.status != TensorStatus::OnlyCandidate, t.dtype_a) + "/" + one(t.status != TensorStatus::OnlyBaseline, t.dtype_b);
}

std::string shape_of(const ComparedTensor& t) {
  if (t.status == TensorStatus::OnlyCandidate) return shape_str(t.shape_b);
  if (t.status == TensorStatus::ShapeMismatch) return shape_str(t.shape_a) + " vs " + shape_str(t.shape_b);
  return shape_str(t.shape_a);
}

std::string number(double value) { return std::isnan(value) ? "n/a" : fmt::format("{:.3e}", value); }
std::string cosine(double value) { return std::isnan(value) ? "n/a" : fmt::format("{:.8f}", value); }

// `reach`: what the AdamW reach part of the tolerances described comes to (one figure, or a group's range).
std::string describe(const Tolerance& tolerance, const std::string& reach) {
  if (tolerance.update_reach > 0) {
    return fmt::format("max abs err <= {:g} + AdamW's reach {}", tolerance.atol - tolerance.update_reach, reach);
  }
  return fmt::format("cosine >= {:g}, max abs err <= {:g} + {:g} * max|a|", tolerance.min_cosine, tolerance.atol,
                     tolerance.rtol);
}

std::string describe(const Tolerance& tolerance) { return describe(tolerance, fmt::format("{:.3g}", tolerance.update_reach)); }

constexpr const char* kRowFormat = "{:<6} {:<58} {:<22} {:<20} {:<9} {:>10} {:>10} {:>10} {:>10} {:>7} {:>9} {:<9} {}\n";

std::string heading() {
  return fmt::format(kRowFormat, "status", "tensor", "op", "shape", "dtype a/b", "cosine", "max abs", "max rel",
                     "rmse", "<1e-3", "err/tol", "group", "truth: verdict, each side's err/bound and its bound");
}

std::string side_ratio(const SideJudgement& side) {
  return side.judged ? fmt::format("{:.3g}", side.ratio) : std::string("-");
}

// "fault on b: a 0.02 b 41 (summation k=768)": what the f64 re-run found.
std::string truth_text(const ComparedTensor& t) {
  if (t.verdict == Verdict::NotRerun) return "";
  if (t.op == kParamGradOp) return fmt::format("{}: {}", verdict_text(t.verdict, t.truth_a, t.truth_b), t.step_rule);
  if (!t.step_rule.empty()) {
    return fmt::format("{}: max abs err / bound {:.3g} ({})", t.verdict == Verdict::Rounding ? "rounding" : "APART",
                       t.truth_b.ratio, t.step_rule);
  }
  std::string text = verdict_text(t.verdict, t.truth_a, t.truth_b);
  if (t.verdict == Verdict::Unjudged) {
    return text + ": " + (t.truth_b.judged ? t.truth_a.unjudged_why : t.truth_b.unjudged_why);
  }
  const BoundTerms& terms = t.truth_b.terms;
  const char* shape = terms.shape == BoundShape::Summation ? "summation" : terms.shape == BoundShape::Elementwise ? "element-wise" : "row-wise";
  return fmt::format("{}: a {} b {} ({} k={})", text, side_ratio(t.truth_a), side_ratio(t.truth_b), shape, terms.reduction);
}

std::string row(const ComparedTensor& t) {
  const bool figures = compared(t);
  return fmt::format(kRowFormat, status_name(t.status), t.name, t.op, shape_of(t), dtypes(t),
                     figures ? cosine(t.metrics.cosine) : "", figures ? number(t.metrics.max_abs) : "",
                     figures ? number(t.metrics.max_rel) : "", figures ? number(t.metrics.rmse) : "",
                     figures ? fmt::format("{:.4f}", t.metrics.within_1e3) : "",
                     figures ? fmt::format("{:.3g}", t.margin) : "", t.group, truth_text(t));
}

json side_json(const SideJudgement& side) {
  if (!side.judged) return {{"judged", false}, {"why", side.unjudged_why}};
  return {{"judged", true}, {"error_over_bound", std::isfinite(side.ratio) ? json(side.ratio) : json(nullptr)},
          {"max_error", std::isfinite(side.max_error) ? json(side.max_error) : json(nullptr)},
          {"max_truth", side.truth_scale}, {"bound", side.terms.formula()}, {"rebuilt_inputs", side.rebuilt}};
}

json metrics_json(const TensorMetrics& m) {
  auto finite_or_null = [](double value) { return std::isfinite(value) ? json(value) : json(nullptr); };
  return {{"cosine", finite_or_null(m.cosine)}, {"max_abs", finite_or_null(m.max_abs)},
          {"max_rel", finite_or_null(m.max_rel)}, {"rmse", finite_or_null(m.rmse)},
          {"within_1e-3", m.within_1e3}, {"max_abs_a", finite_or_null(m.scale)},
          {"nonfinite_mismatches", m.nonfinite_mismatches}, {"elements", m.count}};
}

json tensor_json(const ComparedTensor& t) {
  json entry = {{"name", t.name}, {"op", t.op}, {"status", status_name(t.status)}};
  if (t.status != TensorStatus::OnlyCandidate) {
    entry["shape_a"] = t.shape_a;
    entry["dtype_a"] = dtype_name(t.dtype_a);
  }
  if (t.status != TensorStatus::OnlyBaseline) {
    entry["shape_b"] = t.shape_b;
    entry["dtype_b"] = dtype_name(t.dtype_b);
  }
  if (!t.group.empty()) {
    entry["group"] = t.group;
    entry["tolerance"] = {{"min_cosine", t.tolerance.min_cosine}, {"rtol", t.tolerance.rtol}, {"atol", t.tolerance.atol}};
    if (t.tolerance.update_reach > 0) entry["tolerance"]["adamw_reach"] = t.tolerance.update_reach;
  }
  if (compared(t)) {
    entry["metrics"] = metrics_json(t.metrics);
    entry["margin"] = std::isfinite(t.margin) ? json(t.margin) : json(nullptr);
  }
  if (t.verdict != Verdict::NotRerun) {
    entry["truth"] = {{"verdict", verdict_text(t.verdict, t.truth_a, t.truth_b)}, {"a", side_json(t.truth_a)},
                      {"b", side_json(t.truth_b)}};
  }
  return entry;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

std::string comparison_table(const Comparison& comparison, const ComparisonHeader& header, bool every_tensor) {
  std::string out = fmt::format("a (baseline):  {}\nb (candidate): {}\nbatch: {}\n", header.baseline, header.candidate,
                                header.batch);
  std::map<TensorStatus, int> counts;
  for (const ComparedTensor& t : comparison.tensors) ++counts[t.status];
  out += fmt::format("{} tensors compared: {} pass, {} fail; {} shape mismatches; {} only in a, {} only in b\n\n",
                     counts[TensorStatus::Pass] + counts[TensorStatus::Fail], counts[TensorStatus::Pass],
                     counts[TensorStatus::Fail], counts[TensorStatus::ShapeMismatch], counts[TensorStatus::OnlyBaseline],
                     counts[TensorStatus::OnlyCandidate]);
  if (comparison.truth_available) {
    std::map<Verdict, int> verdicts;
    for (const ComparedTensor& t : comparison.tensors) ++verdicts[t.verdict];
    out += fmt::format("re-run in f64 and judged against that truth: {} rounding differences, {} faults, {} inherited from "
                       "a fault upstream, {} unjudged\n\n",
                       verdicts[Verdict::Rounding], verdicts[Verdict::Fault], verdicts[Verdict::Inherited],
                       verdicts[Verdict::Unjudged]);
  }
  if (comparison.first_divergence) {
    const FirstDivergence& first = *comparison.first_divergence;
    const ComparedTensor& blamed = comparison.tensors[first.tensor];
    const bool fault = blamed.verdict == Verdict::Fault;
    out += fmt::format("FIRST DIVERGENT OP: {} ({}), {} ({}):\n", blamed.name, blamed.op,
                       fault ? "the first fault the f64 re-run found, " + verdict_text(blamed.verdict, blamed.truth_a, blamed.truth_b)
                             : "its inputs all pass",
                       blamed.group.empty() ? "" : describe(blamed.tolerance) + ", group " + blamed.group);
    out += "        " + heading();
    out += "output  " + row(blamed);
    for (size_t input : first.inputs) out += "input   " + row(comparison.tensors[input]);
    if (first.inputs.empty()) out += "        (it reads only graph inputs and parameters)\n";
    out += "\n";
  } else if (comparison.failed()) {
    out += "no single op to blame: every failing tensor reads a failing one\n\n";
  }
  std::vector<const ComparedTensor*> listed;
  for (const ComparedTensor& t : comparison.tensors) {
    if (every_tensor || t.status != TensorStatus::Pass || t.failed()) listed.push_back(&t);
  }
  if (!listed.empty()) {
    out += every_tensor ? "every tensor, in b's execution order:\n" : "tensors that fail or are on one side only:\n";
    out += heading();
    for (const ComparedTensor* t : listed) out += row(*t);
    out += "\n";
  }
  struct GroupStats {
    Tolerance tolerance;
    double least_reach = INFINITY, most_reach = 0;  // AdamW's reach varies with the step
    int tensors = 0, failed = 0;
    double worst = -1;
    std::string worst_name;
  };
  std::map<std::string, GroupStats> groups;
  for (const ComparedTensor& t : comparison.tensors) {
    if (t.group.empty()) continue;
    GroupStats& stats = groups[t.group];
    stats.tolerance = t.tolerance;
    stats.least_reach = std::min(stats.least_reach, t.tolerance.update_reach);
    stats.most_reach = std::max(stats.most_reach, t.tolerance.update_reach);
    ++stats.tensors;
    stats.failed += t.failed();
    const double margin = t.status == TensorStatus::ShapeMismatch ? INFINITY : t.margin;
    if (margin > stats.worst) {
      stats.worst = margin;
      stats.worst_name = t.name;
    }
  }
  out += "tolerance groups (err/tol: the larger of max abs err / allowed and (1 - cosine) / (1 - min cosine); above 1 fails):\n";
  out += fmt::format("{:<22} {:<58} {:>7} {:>6} {:>9}  {}\n", "group", "tolerance", "tensors", "fail", "worst", "at");
  for (const auto& [name, stats] : groups) {
    const std::string reach = stats.least_reach == stats.most_reach
                                  ? fmt::format("{:.3g}", stats.most_reach)
                                  : fmt::format("{:.3g}-{:.3g}", stats.least_reach, stats.most_reach);
    out += fmt::format("{:<22} {:<58} {:>7} {:>6} {:>9.3g}  {}\n", name, describe(stats.tolerance, reach),
                       stats.tensors, stats.failed, stats.worst, stats.worst_name);
  }
  if (!comparison.explanation.empty()) out += "\n" + comparison.explanation;
  out += comparison.failed() ? "\nresult: FAIL\n" : "\nresult: pass\n";
  return out;
}

json comparison_json(const Comparison& comparison, const ComparisonHeader& header) {
  json tensors = json::array();
  for (const ComparedTensor& t : comparison.tensors) tensors.push_back(tensor_json(t));
  json result = {{"a", header.baseline}, {"b", header.candidate}, {"batch", header.batch},
                 {"result", comparison.failed() ? "fail" : "pass"}, {"tensors", tensors}};
  if (comparison.first_divergence) {
    json inputs = json::array();
    for (size_t input : comparison.first_divergence->inputs) inputs.push_back(comparison.tensors[input].name);
    result["first_divergence"] = {{"tensor", comparison.tensors[comparison.first_divergence->tensor].name},
                                  {"op", comparison.tensors[comparison.first_divergence->tensor].op},
                                  {"inputs", inputs}};
  } else {
    result["first_divergence"] = nullptr;
  }
  return result;
}

std::string comparison_csv(const Comparison& comparison) {
  std::string out =
      "name,op,status,shape_a,shape_b,dtype_a,dtype_b,cosine,max_abs,max_rel,rmse,within_1e-3,max_abs_a,margin,group,"
      "min_cosine,rtol,atol\n";
  for (const ComparedTensor& t : comparison.tensors) {
    const bool figures = compared(t);
    auto figure = [&](double value) { return figures && std::isfinite(value) ? fmt::format("{:.17g}", value) : std::string(); };
    const bool has_a = t.status != TensorStatus::OnlyCandidate, has_b = t.status != TensorStatus::OnlyBaseline;
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(t.name), t.op,
                       status_name(t.status), has_a ? csv_field(shape_str(t.shape_a)) : "",
                       has_b ? csv_field(shape_str(t.shape_b)) : "", has_a ? dtype_name(t.dtype_a) : "",
                       has_b ? dtype_name(t.dtype_b) : "", figure(t.metrics.cosine), figure(t.metrics.max_abs),
                       figure(t.metrics.max_rel), figure(t.metrics.rmse), figure(t.metrics.within_1e3),
                       figure(t.metrics.scale), figure(t.margin), t.group,
                       t.group.empty() ? "" : fmt::format("{:g}", t.tolerance.min_cosine),
                       t.group.empty() ? "" : fmt::format("{:g}", t.tolerance.rtol),
                       t.group.empty() ? "" : fmt::format("{:g}", t.tolerance.atol));
  }
  return out;
}

}  // namespace strata
