#include "ops/dispatcher.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/trace.h"

namespace strata {

FallbackPolicy parse_fallback_policy(const std::string& text) {
  if (text == "allow") return FallbackPolicy::Allow;
  if (text == "warn") return FallbackPolicy::Warn;
  if (text == "error") return FallbackPolicy::Error;
  fail("ops.fallback must be \"allow\", \"warn\" or \"error\", got \"{}\"", text);
}

std::string_view route_name(Route route) {
  switch (route) {
    case Route::Native: return "native";
    case Route::Emulated: return "emulated";
    case Route::Decomposed: return "decomposed";
    case Route::Reference: return "ref-fallback";
  }
  return "?";
}

Dispatcher::Dispatcher(const Backend& primary, const Backend& reference, FallbackPolicy policy)
    : primary_(primary), reference_(reference), policy_(policy) {}

KernelChoice Dispatcher::resolve(const std::string& op, DType dtype) {
  KernelChoice choice;
  choice.schema = &OpRegistry::global().get(op);
  choice.dtype = dtype;
  if ((choice.kernel = primary_.find(op, dtype)) != nullptr) {
    if (!primary_.is_emulated(op, dtype)) return choice;
    choice.route = Route::Emulated;
  } else if (choice.schema->decompose) {
    choice.route = Route::Decomposed;
  } else if ((choice.kernel = reference_.find(op, dtype)) != nullptr) {
    choice.route = Route::Reference;
  } else {
    fail("op '{}' has no {} kernel on backend '{}', no decomposition and no '{}' kernel", op, dtype_name(dtype),
         primary_.name(), reference_.name());
  }
  if (policy_ == FallbackPolicy::Error) {
    fail("op '{}' ({}) has no native kernel on backend '{}' and would run {} (ops.fallback = \"error\")", op,
         dtype_name(dtype), primary_.name(), route_name(choice.route));
  }
  if (policy_ == FallbackPolicy::Warn) {
    std::lock_guard lock(mutex_);
    if (warned_.insert({op, dtype}).second) {
      if (choice.route == Route::Emulated) {
        spdlog::warn("op '{}' ({}): backend '{}' has no {} arithmetic for it and computes it in a wider type", op,
                     dtype_name(dtype), primary_.name(), dtype_name(dtype));
      } else {
        spdlog::warn("op '{}' ({}) has no kernel on backend '{}': running {}", op, dtype_name(dtype), primary_.name(),
                     route_name(choice.route));
      }
    }
  }
  return choice;
}

void Dispatcher::execute(const KernelChoice& choice, const Tensors& inputs, const Tensors& outputs,
                         const Attrs& attrs) {
  if (choice.route != Route::Native) {
    std::string shape = shape_str(inputs.at(choice.schema->dtype_input).shape());
    std::lock_guard lock(mutex_);
    ++counts_[{choice.schema->name, choice.dtype, shape, choice.route}];
  }
  if (choice.route == Route::Decomposed) {
    choice.schema->decompose(*this, inputs, outputs, attrs);
  } else {
    (*choice.kernel)(inputs, outputs, attrs);
  }
}

DType Dispatcher::selecting_dtype(const OpSchema& schema, const Tensors& inputs) const {
  STRATA_CHECK(schema.dtype_input < inputs.size(), "op '{}' given {} inputs", schema.name, inputs.size());
  return inputs[schema.dtype_input].dtype();
}

std::optional<Route> Dispatcher::route_if_any(const std::string& op, DType dtype) {
  try {
    return resolve(op, dtype).route;
  } catch (const Error&) {
    return std::nullopt;
  }
}

void Dispatcher::run(const std::string& op, const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  // An eager op (outside a compiled graph: the optimizer's, gradient bookkeeping) is a kernel span too.
  trace::Span span(op, "kernel");
  if (span) [[unlikely]] {
    std::string shapes;
    for (const Tensor& tensor : inputs) shapes += fmt::format("{}\"{}\"", shapes.empty() ? "" : ",", shape_str(tensor.shape()));
    span.set_args(fmt::format(R"({{"eager":true,"dtype":"{}","inputs":[{}]}})",
                              inputs.empty() ? "" : dtype_name(inputs.front().dtype()), shapes));
  }
  const OpSchema& schema = OpRegistry::global().get(op);
  Metas expected = OpRegistry::global().infer(op, metas_of(inputs), attrs);
  STRATA_CHECK(expected == metas_of(outputs), "op '{}' given outputs of the wrong shape or dtype", op);
  for (const Tensor& tensor : inputs) STRATA_CHECK(tensor.is_contiguous(), "op '{}' given a strided input", op);
  for (const Tensor& tensor : outputs) STRATA_CHECK(tensor.is_contiguous(), "op '{}' given a strided output", op);
  execute(resolve(op, selecting_dtype(schema, inputs)), inputs, outputs, attrs);
}

Tensors Dispatcher::call(const std::string& op, const Tensors& inputs, const Attrs& attrs) {
  Metas metas = OpRegistry::global().infer(op, metas_of(inputs), attrs);
  Tensors outputs;
  for (const TensorMeta& meta : metas) outputs.push_back(Tensor::empty(meta.shape, meta.dtype));
  run(op, inputs, outputs, attrs);
  return outputs;
}

std::vector<FallbackRecord> Dispatcher::records() const {
  std::lock_guard lock(mutex_);
  std::vector<FallbackRecord> result;
  for (const auto& [key, count] : counts_) {
    const auto& [op, dtype, shape, route] = key;
    result.push_back({op, dtype, shape, route, count});
  }
  return result;
}

std::string Dispatcher::summary() const {
  std::vector<FallbackRecord> all = records();
  if (all.empty()) return "";
  std::string text = fmt::format("ops not native on backend '{}':\n  {:<24} {:<5} {:<14} {:<20} {:>8}\n",
                                 primary_.name(), "op", "dtype", "route", "shape", "count");
  for (const FallbackRecord& record : all) {
    text += fmt::format("  {:<24} {:<5} {:<14} {:<20} {:>8}\n", record.op, dtype_name(record.dtype),
                        route_name(record.route), record.shape, record.count);
  }
  return text;
}

}  // namespace strata
