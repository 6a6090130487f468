#include "ops/dispatcher.h"

#include <chrono>

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

std::string_view transfer_direction_name(TransferDirection direction) {
  return direction == TransferDirection::ToHost ? "to host" : "to device";
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
  } else if (choice.route == Route::Reference && !primary_.device().is_host()) {
    run_on_host(choice, inputs, outputs, attrs);
  } else {
    (*choice.kernel)(inputs, outputs, attrs);
  }
}

void Dispatcher::run_on_host(const KernelChoice& choice, const Tensors& inputs, const Tensors& outputs,
                             const Attrs& attrs) {
  const Device& device = primary_.device();
  device.synchronize();  // the inputs' producers first: the copies' time is then the copies' own
  Tensors host_inputs, host_outputs;
  for (const Tensor& input : inputs) {
    host_inputs.push_back(input.on_host() ? input : Tensor::empty(input.shape(), input.dtype()));
    if (!input.on_host()) copy_counted(input, host_inputs.back(), choice, TransferDirection::ToHost);
  }
  for (const Tensor& output : outputs) {
    host_outputs.push_back(output.on_host() ? output : Tensor::empty(output.shape(), output.dtype()));
  }
  (*choice.kernel)(host_inputs, host_outputs, attrs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].on_host()) copy_counted(host_outputs[i], outputs[i], choice, TransferDirection::ToDevice);
  }
}

void Dispatcher::copy_counted(const Tensor& source, const Tensor& target, const KernelChoice& choice,
                              TransferDirection direction) {
  trace::Span span(direction == TransferDirection::ToHost ? "to_host" : "to_device", "transfer");
  if (span) [[unlikely]] {
    span.set_args(fmt::format(R"({{"op":"{}","bytes":{},"shape":"{}"}})", choice.schema->name, source.nbytes(),
                              shape_str(source.shape())));
  }
  const auto start = std::chrono::steady_clock::now();
  Tensor(target).copy_from(source);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard lock(mutex_);
  TransferRecord& record = transfers_[{choice.schema->name, choice.dtype, direction}];
  record.op = choice.schema->name;
  record.dtype = choice.dtype;
  record.direction = direction;
  record.count += 1;
  record.bytes += static_cast<int64_t>(source.nbytes());
  record.seconds += seconds;
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
  for (const TensorMeta& meta : metas) outputs.push_back(Tensor::empty(meta.shape, meta.dtype, primary_.device()));
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

std::vector<TransferRecord> Dispatcher::transfers() const {
  std::lock_guard lock(mutex_);
  std::vector<TransferRecord> result;
  for (const auto& entry : transfers_) result.push_back(entry.second);
  return result;
}

TransferTotals total_of(const std::vector<TransferRecord>& records) {
  TransferTotals totals;
  for (const TransferRecord& record : records) {
    totals.count += record.count;
    totals.bytes += record.bytes;
    totals.seconds += record.seconds;
  }
  return totals;
}

TransferTotals copies_of_route(Route route, const Device& device, const Metas& inputs, const Metas& outputs) {
  TransferTotals copies;
  if (route != Route::Reference || device.is_host()) return copies;
  for (const Metas* moved : {&inputs, &outputs}) {
    for (const TensorMeta& meta : *moved) {
      copies.count += 1;
      copies.bytes += static_cast<int64_t>(meta.nbytes());
    }
  }
  return copies;
}

TransferTotals Dispatcher::transfer_totals() const { return total_of(transfers()); }

std::string Dispatcher::summary() const {
  std::vector<FallbackRecord> all = records();
  std::string text = fallback_table(all);
  std::vector<TransferRecord> moved = transfers();
  if (moved.empty()) return text;
  text += fmt::format("transfers between '{}' ({}) and the host:\n  {:<24} {:<5} {:<10} {:>8} {:>12} {:>10}\n",
                      primary_.name(), primary_.device().name(), "op", "dtype", "direction", "tensors", "bytes", "ms");
  for (const TransferRecord& record : moved) {
    text += fmt::format("  {:<24} {:<5} {:<10} {:>8} {:>12} {:>10.3f}\n", record.op, dtype_name(record.dtype),
                        transfer_direction_name(record.direction), record.count, record.bytes, record.seconds * 1e3);
  }
  return text;
}

std::string Dispatcher::fallback_table(const std::vector<FallbackRecord>& all) const {
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
