#include "ops/schema.h"

#include <algorithm>
#include <mutex>

#include "ops/standard_ops.h"

namespace strata {

const OpRegistry& OpRegistry::global() {
  static const OpRegistry registry = [] {
    OpRegistry built;
    register_standard_ops(built);
    return built;
  }();
  return registry;
}

void OpRegistry::add(OpSchema schema) {
  STRATA_CHECK(!contains(schema.name), "op '{}' registered twice", schema.name);
  STRATA_CHECK(static_cast<bool>(schema.infer) && static_cast<bool>(schema.flops), "op '{}' lacks infer or flops",
               schema.name);
  schemas_.push_back(std::move(schema));
}

const OpSchema& OpRegistry::get(const std::string& name) const {
  for (const OpSchema& schema : schemas_) {
    if (schema.name == name) return schema;
  }
  fail("unknown op '{}'", name);
}

bool OpRegistry::contains(const std::string& name) const {
  return std::any_of(schemas_.begin(), schemas_.end(), [&](const OpSchema& s) { return s.name == name; });
}

std::vector<std::string> OpRegistry::names() const {
  return names_where([](const OpSchema&) { return true; });
}

std::vector<std::string> OpRegistry::names_where(const std::function<bool(const OpSchema&)>& has) const {
  std::vector<std::string> result;
  for (const OpSchema& schema : schemas_) {
    if (has(schema)) result.push_back(schema.name);
  }
  std::sort(result.begin(), result.end());
  return result;
}

Metas OpRegistry::infer(const std::string& name, const Metas& inputs, const Attrs& attrs) const {
  const OpSchema& schema = get(name);
  if (inputs.size() != schema.inputs.size()) {
    fail("op '{}' takes {} inputs, got {}", name, schema.inputs.size(), inputs.size());
  }
  for (const std::string& attr : schema.attrs) {
    if (!attrs.has(attr)) fail("op '{}' needs attribute '{}'", name, attr);
  }
  Metas outputs = schema.infer(inputs, attrs);
  STRATA_CHECK(outputs.size() == schema.outputs.size(), "op '{}' inferred {} outputs", name, outputs.size());
  return outputs;
}

OpCost OpRegistry::cost(const std::string& name, const Metas& inputs, const Attrs& attrs) const {
  const OpSchema& schema = get(name);
  Metas outputs = infer(name, inputs, attrs);
  OpCost cost;
  cost.flops = schema.flops(inputs, outputs, attrs);
  if (schema.bytes) {
    cost.bytes = schema.bytes(inputs, outputs, attrs);
  } else {
    for (const TensorMeta& meta : inputs) cost.bytes += static_cast<double>(meta.nbytes());
    for (const TensorMeta& meta : outputs) cost.bytes += static_cast<double>(meta.nbytes());
  }
  if (schema.comm) cost.comm = schema.comm(inputs, outputs, attrs);
  return cost;
}

Metas metas_of(const Tensors& tensors) {
  Metas metas;
  metas.reserve(tensors.size());
  for (const Tensor& tensor : tensors) metas.push_back({tensor.shape(), tensor.dtype()});
  return metas;
}

}  // namespace strata
