#include "compare/tolerance.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "compare/capture.h"
#include "ops/schema.h"

namespace strata {

namespace {

const std::vector<std::string>& judged_dtypes() {
  static const std::vector<std::string> names{"f32", "bf16", "f16"};
  return names;
}

int mantissa_bits(DType dtype) {
  switch (dtype) {
    case DType::F64: return 52;
    case DType::F16: return 10;
    case DType::BF16: return 7;
    default: return 23;  // f32, and integers
  }
}

std::set<std::string> op_types() {
  const std::vector<std::string> registered = OpRegistry::global().names();
  std::set<std::string> types(registered.begin(), registered.end());
  types.insert({kParamGradOp, kStepLossOp, kStepGradNormOp, kStepParamOp});
  return types;
}

void read_into(const TomlReader& table, Tolerance& tolerance) {
  if (table.has("min_cosine")) {
    const double value = table.number("min_cosine");
    if (value < -1 || value > 1) table.fail_range("min_cosine", "in [-1, 1]", value);
    tolerance.min_cosine = value;
  }
  if (table.has("rtol")) tolerance.rtol = table.non_negative("rtol");
  if (table.has("atol")) tolerance.atol = table.non_negative("atol");
}

}  // namespace

bool Tolerance::passes(const TensorMetrics& m) const {
  if (m.nonfinite_mismatches > 0 || std::isnan(m.max_abs)) return false;
  return margin(m) <= 1;
}

double Tolerance::margin(const TensorMetrics& m) const {
  const double allowed = atol + rtol * m.scale;
  double worst = allowed > 0 ? m.max_abs / allowed : (m.max_abs > 0 ? INFINITY : 0);
  // A floor of -1 judges no cosine (every cosine meets it), and adds nothing to how close a tensor is to failing.
  if (!std::isnan(m.cosine) && m.cosine < 1 && min_cosine > -1) {
    worst = std::max(worst, min_cosine < 1 ? (1 - m.cosine) / (1 - min_cosine) : INFINITY);
  }
  return worst;
}

DType judged_dtype(DType a, DType b) {
  const DType narrower = mantissa_bits(a) <= mantissa_bits(b) ? a : b;
  return mantissa_bits(narrower) >= 23 ? DType::F32 : narrower;
}

// Defaults (README.md gives the measurements behind them): f32 with about 40x the margin of the
// largest error between two correct f32 implementations; bf16 and f16 a few times what mixed
// precision gives against f32; parameters after AdamW steps an absolute floor, as the update
// magnifies the rounding of gradients near its eps.
ToleranceTable::ToleranceTable() {
  dtypes_["f32"] = {.min_cosine = 0.999999, .rtol = 1e-4, .atol = 1e-9};
  dtypes_["bf16"] = {.min_cosine = 0.999, .rtol = 0.1, .atol = 1e-6};
  dtypes_["f16"] = {.min_cosine = 0.9999, .rtol = 0.02, .atol = 1e-7};
  ops_[{"f32", kStepParamOp}] = {.min_cosine = 0.999999, .rtol = 1e-3, .atol = 1e-5};
}

void ToleranceTable::apply(const TomlReader& compare) {
  compare.only({judged_dtypes().begin(), judged_dtypes().end()});
  const std::set<std::string> ops = op_types();
  for (const std::string& dtype : judged_dtypes()) {
    if (!compare.has(dtype)) continue;
    const TomlReader table = compare.table(dtype);
    std::set<std::string> allowed = ops;
    allowed.insert({"min_cosine", "rtol", "atol"});
    table.only(allowed);
    read_into(table, dtypes_.at(dtype));
  }
  // Op types second: keys they do not give come from their dtype's table, as given.
  for (const std::string& dtype : judged_dtypes()) {
    if (!compare.has(dtype)) continue;
    const TomlReader table = compare.table(dtype);
    for (const std::string& op : table.keys()) {
      if (!ops.count(op)) continue;
      const TomlReader op_table = table.table(op);
      op_table.only({"min_cosine", "rtol", "atol"});
      Tolerance tolerance = dtypes_.at(dtype);
      if (auto found = ops_.find({dtype, op}); found != ops_.end()) tolerance = found->second;
      read_into(op_table, tolerance);
      ops_[{dtype, op}] = tolerance;
    }
  }
}

ToleranceTable::Group ToleranceTable::lookup(const std::string& op, DType dtype, double update_reach) const {
  const std::string name(dtype_name(judged_dtype(dtype, dtype)));
  if (auto found = ops_.find({name, op}); found != ops_.end()) return {name + "." + op, found->second};
  if (op == kStepParamOp && name != "f32") {
    // No cosine: where the updates are rounding noise, the tensor's direction is noise too.
    const double atol = dtypes_.at(name).atol;
    return {name + "." + op, {.min_cosine = -1, .rtol = 0, .atol = atol + update_reach, .update_reach = update_reach}};
  }
  return {name, dtypes_.at(name)};
}

}  // namespace strata
