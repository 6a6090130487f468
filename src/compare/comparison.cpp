#include "compare/comparison.h"

#include <algorithm>
#include <functional>
#include <set>

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

bool Comparison::failed() const {
  return std::any_of(tensors.begin(), tensors.end(), [](const ComparedTensor& t) { return t.failed(); });
}

Comparator::Comparator(ToleranceTable tolerances, bool report_candidate_only)
    : tolerances_(std::move(tolerances)), report_candidate_only_(report_candidate_only) {}

void Comparator::add_baseline(CapturedTensor&& tensor) {
  STRATA_CHECK(!baseline_.count(tensor.name), "two baseline tensors named '{}'", tensor.name);
  baseline_order_.push_back(tensor.name);
  baseline_.emplace(tensor.name, std::move(tensor));
}

void Comparator::add_candidate(CapturedTensor&& b) {
  lineage_[b.name] = b.inputs;
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
  }
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
  for (size_t i = 0; i < tensors_.size() && !result.first_divergence; ++i) {
    if (!tensors_[i].failed()) continue;
    std::set<size_t> read;
    for (const std::string& input : inputs_[i]) {
      const std::set<size_t>& upstream = nearest(input);
      read.insert(upstream.begin(), upstream.end());
    }
    if (std::none_of(read.begin(), read.end(), [&](size_t j) { return tensors_[j].failed(); })) {
      result.first_divergence = FirstDivergence{i, {read.begin(), read.end()}};
    }
  }
  result.tensors = std::move(tensors_);
  return result;
}

}  // namespace strata
