#include "graph/autocast.h"

namespace strata {

namespace {

// Wider first: the dtype an op following its inputs computes in is the first of these present.
int width_rank(DType dtype) {
  switch (dtype) {
    case DType::F64: return 3;
    case DType::F32: return 2;
    default: return 1;  // bf16, f16
  }
}

const OpSchema& schema_of(const std::string& op) { return OpRegistry::global().get(op); }

}  // namespace

std::vector<std::string> default_fp32_ops() {
  return OpRegistry::global().names_where(
      [](const OpSchema& schema) { return schema.precision == PrecisionRole::F32Default; });
}

DType parse_precision_mode(const std::string& mode, const std::string& what) {
  DType dtype = DType::I32;  // not a precision: refused below
  try {
    dtype = parse_dtype(mode);
  } catch (const Error&) {
  }
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16) {
    fail("{} must be f32, bf16 or f16 (fp32 and fp16 are accepted too), got \"{}\"", what, mode);
  }
  return dtype;
}

PrecisionPolicy PrecisionPolicy::parse(const std::string& mode, const std::vector<std::string>& fp32_ops,
                                       const std::string& key) {
  PrecisionPolicy policy;
  policy.low = parse_precision_mode(mode, "precision mode");
  for (const std::string& op : fp32_ops) {
    if (!OpRegistry::global().contains(op)) {
      std::string known;
      for (const std::string& name : OpRegistry::global().names()) known += (known.empty() ? "" : ", ") + name;
      fail("config key '{}': '{}' is not an op (ops: {})", key, op, known);
    }
    policy.fp32_ops.insert(op);
  }
  return policy;
}

Autocast::Autocast(Graph& graph, PrecisionPolicy policy) : graph_(graph), policy_(std::move(policy)) {}

DType Autocast::compute_dtype(const std::string& op, const std::vector<int>& inputs) const {
  if (policy_.low == DType::F32) return DType::F32;
  if (schema_of(op).precision == PrecisionRole::FollowsInputs) {
    DType widest = policy_.low;
    for (int input : inputs) {
      DType dtype = graph_.value(input).meta.dtype;
      if (is_floating(dtype) && width_rank(dtype) > width_rank(widest)) widest = dtype;
    }
    return widest;
  }
  return policy_.fp32_ops.count(op) ? DType::F32 : policy_.low;
}

std::vector<int> Autocast::apply(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs,
                                 const std::string& label) {
  if (policy_.low == DType::F32) return graph_.apply(op, inputs, attrs, label);
  DType compute = compute_dtype(op, inputs);
  if (compute == DType::F32 && schema_of(op).reads_any_float_as_f32) return graph_.apply(op, inputs, attrs, label);
  std::vector<int> cast_inputs;
  for (int input : inputs) {
    DType dtype = graph_.value(input).meta.dtype;
    // f64 inputs are left alone: they mean a deliberately double-precision graph.
    bool convert = is_floating(dtype) && dtype != compute && dtype != DType::F64;
    cast_inputs.push_back(convert ? cast(input, compute) : input);
  }
  return graph_.apply(op, cast_inputs, attrs, label);
}

int Autocast::cast(int value, DType dtype) {
  auto key = std::pair{value, dtype};
  auto found = casts_.find(key);
  if (found != casts_.end()) return found->second;
  std::string name(dtype_name(dtype));
  int converted = graph_.apply1("cast", {value}, {{"dtype", name}}, graph_.value(value).name + ".to_" + name);
  casts_.emplace(key, converted);
  return converted;
}

}  // namespace strata
