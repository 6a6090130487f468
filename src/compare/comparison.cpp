#include "compare/comparison.h"

#include <algorithm>
#include <functional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace strata {

std::string_view status_name(TensorStatus status) {
  switch (status) {
    case TensorStatus::Pass: return "pass";
    case TensorStatus::Fail: return "FAIL";
    case TensorStatus::ShapeMismatch: return "SHAPE";
    case TensorStatus::OnlyBaseline: return "only a";
    case TensorStatus::OnlyCandidate: return "only b";
  }
  return "?";
}

std::string verdict_text(Verdict verdict, const SideJudgement& a, const SideJudgement& b) {
  switch (verdict) {
    case Verdict::NotRerun: return "";
    case Verdict::Unjudged: return "unjudged";
    case Verdict::Rounding: return "rounding";
    case Verdict::Inherited: return "inherited";
    case Verdict::Fault:
      return a.within() ? "fault on b" : b.within() ? "fault on a" : "fault on both";
  }
  return "?";
}

Rerun parse_rerun(const std::string& text) {
  if (text == "none") return Rerun::None;
  if (text == "failing") return Rerun::Failing;
  if (text == "all") return Rerun::All;
  fail("--rerun must be none, failing or all, got '{}'", text);
}

bool ComparedTensor::failed() const {
  if (status == TensorStatus::ShapeMismatch || verdict == Verdict::Fault || verdict == Verdict::Inherited) return true;
  return status == TensorStatus::Fail && verdict != Verdict::Rounding;
}

namespace {

// One in eight by a hash of the name (FNV-1a): the same passing tensors are re-run every time.
bool sampled(const std::string& name) {
  uint64_t hash = 1469598103934665603ull;
  for (char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return hash % 8 == 0;
}

std::string side_text(const char* side, const SideJudgement& judgement) {
  if (!judgement.judged) return fmt::format("  side {}: not judged: {}\n", side, judgement.unjudged_why);
  std::string text = fmt::format(
      "  side {}: max |{} - truth| {:.4g} (max |truth| {:.4g}); worst element {}: {} {:.9g}, truth {:.9g}, bound {:.4g}, "
      "error/bound {:.3g}: {}\n    bound {}\n",
      side, side, judgement.max_error, judgement.truth_scale, judgement.worst, side, judgement.side_at_worst,
      judgement.truth_at_worst, judgement.bound_at_worst, judgement.ratio,
      judgement.within() ? "within bound" : "OUT OF BOUND", judgement.terms.formula());
  if (!judgement.rebuilt.empty()) text += fmt::format("    rebuilt from side a's nodes: {}\n", fmt::join(judgement.rebuilt, ", "));
  return text;
}

}  // namespace

bool Comparison::failed() const {
  return std::any_of(tensors.begin(), tensors.end(), [](const ComparedTensor& t) { return t.failed(); });
}

Comparator::Comparator(ToleranceTable tolerances, bool report_candidate_only)
    : tolerances_(std::move(tolerances)), report_candidate_only_(report_candidate_only) {}

void Comparator::judge_against_truth(Rerun rerun, std::string explain, bool candidate_nodes) {
  rerun_ = rerun;
  explain_ = std::move(explain);
  if (rerun_ != Rerun::None || !explain_.empty()) truth_ = std::make_unique<TruthJudge>(candidate_nodes);
}

void Comparator::add_graph_input(const std::string& name, const Tensor& value, bool side_b) {
  if (truth_) truth_->add_graph_input(name, value, side_b);
}

void Comparator::judge(ComparedTensor& t, const CapturedTensor& b) {
  const bool wanted = t.name == explain_ || rerun_ == Rerun::All ||
                      (rerun_ == Rerun::Failing && (t.status == TensorStatus::Fail || sampled(t.name)));
  if (!truth_ || !wanted) return;
  if (t.op == kParamGradOp) {
    // Its parts summed in f64 (each part judged as its op's output): a rounding difference unless a part failed.
    t.verdict = Verdict::Rounding;
    t.step_rule = "the sum of its parts, each judged by its own op";
  } else if (!truth_->can_judge(b.name)) {
    t.verdict = Verdict::Unjudged;
    t.truth_a.unjudged_why = t.truth_b.unjudged_why = fmt::format("no bound for op '{}' or a side lacks it", t.op);
  } else {
    t.truth_a = truth_->judge(b.name, false);
    t.truth_b = truth_->judge(b.name, true);
    const bool both = t.truth_a.judged && t.truth_b.judged;
    t.verdict = !both ? Verdict::Unjudged : t.truth_a.within() && t.truth_b.within() ? Verdict::Rounding : Verdict::Fault;
  }
  if (t.name == explain_) {
    const Attrs* attrs = truth_->attrs_of(b.name);
    explanation_ = fmt::format("{}: op {} {}, output {}\n{}{}{}  tolerance: {} (margin {:.3g})\n", t.name, t.op,
                               attrs ? attrs->str() : "", b.output, truth_->describe_inputs(b.name),
                               side_text("a", t.truth_a), side_text("b", t.truth_b), status_name(t.status), t.margin);
  }
}

// The loss and gradient norm of correct runs differ by about what reordering one run's sums does (a factor
// 4 over the one reordering measured: two runs differ in more sums than one reordering changes), where both
// compute in the same precision; bf16 against f32 differs by bf16's rounding throughout, which no reordering
// of f32 sums shows, so there the dtype's step_loss and step_grad_norm groups judge alone.
void Comparator::judge_step(ComparedTensor& t, DType a, DType b) const {
  constexpr double kSpreadFactor = 4;
  auto spread = step_spread_.find(t.name);
  if (a != b || spread == step_spread_.end() || !(spread->second > 0)) return;
  t.step_bound = kSpreadFactor * spread->second;
  t.step_rule = fmt::format("{} x the spread of side a re-run with its sums reordered, {:.3g}", kSpreadFactor, spread->second);
  judged_by_rule(t, t.metrics.max_abs <= t.step_bound);
}

// A parameter after steps that its group fails. AdamW divides by sqrt(v): where an element's gradients are
// at their rounding's level, two correct runs' updates of it differ by up to a learning rate a step, so a
// few elements past the tolerance but within both runs' reach are rounding amplified; an update rule that
// differs (a learning rate, a beta, weight decay) moves nearly every element, and is a fault however small.
void Comparator::judge_parameter(ComparedTensor& t, const CapturedTensor& a, const CapturedTensor& b) const {
  constexpr double kAmplifiedShare = 0.01;
  const double reach = a.update_reach + b.update_reach;
  if (t.status != TensorStatus::Fail || !(reach > 0)) return;
  const Tensor wide_a = a.tensor.to(DType::F64), wide_b = b.tensor.to(DType::F64);
  const double allowed = t.tolerance.atol + t.tolerance.rtol * t.metrics.scale;
  int64_t past = 0;
  for (int64_t i = 0; i < wide_a.numel(); ++i) {
    past += std::abs(wide_b.data<double>()[i] * b.factor - wide_a.data<double>()[i] * a.factor) > allowed;
  }
  const double share = static_cast<double>(past) / static_cast<double>(std::max<int64_t>(wide_a.numel(), 1));
  t.step_bound = reach;
  t.step_rule = fmt::format("{} of {} elements past the tolerance ({:.2g}%; AdamW-amplified rounding reaches at most {:g}%), "
                            "all within both runs' AdamW reach {:.3g}: {}",
                            past, wide_a.numel(), 100 * share, 100 * kAmplifiedShare, reach,
                            t.metrics.max_abs <= reach ? "yes" : "no");
  judged_by_rule(t, t.metrics.max_abs <= reach && share <= kAmplifiedShare);
}

void Comparator::judged_by_rule(ComparedTensor& t, bool within) {
  t.verdict = within ? Verdict::Rounding : Verdict::Fault;
  t.truth_b.judged = true;  // the rule judges the pair, not one side
  t.truth_b.ratio = t.step_bound > 0 ? t.metrics.max_abs / t.step_bound : INFINITY;
  t.truth_a = t.truth_b;
}

void Comparator::add_baseline(CapturedTensor&& tensor) {
  if (truth_) truth_->add_baseline(tensor);
  STRATA_CHECK(!baseline_.count(tensor.name), "two baseline tensors named '{}'", tensor.name);
  baseline_order_.push_back(tensor.name);
  baseline_.emplace(tensor.name, std::move(tensor));
}

void Comparator::add_candidate(CapturedTensor&& b) {
  lineage_[b.name] = b.inputs;
  if (truth_) truth_->add_candidate(b);
  auto found = baseline_.find(b.name);
  if (found == baseline_.end()) {
    if (!report_candidate_only_) return;
    ComparedTensor only{.name = b.name, .op = b.op, .status = TensorStatus::OnlyCandidate};
    only.shape_b = b.tensor.shape();
    only.dtype_b = b.dtype;
    listed_[b.name] = tensors_.size();
    tensors_.push_back(std::move(only));
    inputs_.push_back(b.inputs);
    return;
  }
  const CapturedTensor& a = found->second;
  ComparedTensor t{.name = b.name, .op = b.op};
  t.shape_a = a.tensor.shape();
  t.shape_b = b.tensor.shape();
  t.dtype_a = a.dtype;
  t.dtype_b = b.dtype;
  const ToleranceTable::Group group =
      tolerances_.lookup(b.op, judged_dtype(a.precision, b.precision), a.update_reach + b.update_reach);
  t.group = group.name;
  t.tolerance = group.tolerance;
  if (t.shape_a != t.shape_b) {
    t.status = TensorStatus::ShapeMismatch;
  } else {
    t.metrics = compare_tensors(a.tensor, b.tensor, a.factor, b.factor);
    t.margin = group.tolerance.margin(t.metrics);
    t.status = group.tolerance.passes(t.metrics) ? TensorStatus::Pass : TensorStatus::Fail;
    const bool step = t.op == kStepLossOp || t.op == kStepGradNormOp || t.op == kStepParamOp;
    if (t.op == kStepParamOp && truth_) {
      judge_parameter(t, a, b);
    } else if (step && truth_) {
      judge_step(t, a.precision, b.precision);
    } else if (!step) {
      judge(t, b);
    }
  }
  if (truth_) truth_->done(b.name);
  baseline_.erase(found);
  listed_[t.name] = tensors_.size();
  tensors_.push_back(std::move(t));
  inputs_.push_back(std::move(b.inputs));
}

Comparison Comparator::finish() && {
  Comparison result;
  for (const std::string& name : baseline_order_) {
    auto found = baseline_.find(name);
    if (found == baseline_.end()) continue;
    ComparedTensor only{.name = name, .op = found->second.op, .status = TensorStatus::OnlyBaseline};
    only.shape_a = found->second.tensor.shape();
    only.dtype_a = found->second.dtype;
    tensors_.push_back(std::move(only));
    inputs_.emplace_back();
  }
  // The compared tensors nearest to `name` upstream: itself if compared, else through what its op read.
  std::map<std::string, std::set<size_t>> memo;
  std::function<const std::set<size_t>&(const std::string&)> nearest = [&](const std::string& name) -> const std::set<size_t>& {
    if (auto done = memo.find(name); done != memo.end()) return done->second;
    std::set<size_t> found;
    auto listed = listed_.find(name);
    if (listed != listed_.end() && tensors_[listed->second].status != TensorStatus::OnlyCandidate) {
      found.insert(listed->second);
    } else if (auto read = lineage_.find(name); read != lineage_.end()) {
      for (const std::string& input : read->second) {
        const std::set<size_t>& upstream = nearest(input);
        found.insert(upstream.begin(), upstream.end());
      }
    }  // else a graph input or parameter: nothing compared upstream
    return memo[name] = std::move(found);
  };
  auto read_by = [&](size_t i) {
    std::set<size_t> read;
    for (const std::string& input : inputs_[i]) {
      const std::set<size_t>& upstream = nearest(input);
      read.insert(upstream.begin(), upstream.end());
    }
    return read;
  };
  auto any_failed = [&](const std::set<size_t>& read) {
    return std::any_of(read.begin(), read.end(), [&](size_t j) { return tensors_[j].failed(); });
  };
  // Both sides within bound: a rounding difference, unless what it read was already wrong (in execution
  // order, so upstream verdicts are final).
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].verdict == Verdict::Rounding && any_failed(read_by(i))) tensors_[i].verdict = Verdict::Inherited;
  }
  // The first fault the truth found; without one, the earliest failure whose inputs all pass.
  for (size_t i = 0; i < tensors_.size() && !result.first_divergence; ++i) {
    if (tensors_[i].verdict != Verdict::Fault) continue;
    const std::set<size_t> read = read_by(i);
    result.first_divergence = FirstDivergence{i, {read.begin(), read.end()}};
  }
  for (size_t i = 0; i < tensors_.size() && !result.first_divergence; ++i) {
    if (!tensors_[i].failed()) continue;
    const std::set<size_t> read = read_by(i);
    if (!any_failed(read)) result.first_divergence = FirstDivergence{i, {read.begin(), read.end()}};
  }
  result.truth_available = truth_ != nullptr;
  result.explanation = explanation_;
  result.tensors = std::move(tensors_);
  return result;
}

}  // namespace strata
