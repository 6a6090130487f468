#include "backends/planted_fault.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace strata {

namespace {

constexpr const char* kVariable = "STRATA_TEST_PLANT_FAULT";

bool is_attention(const std::string& op) { return op == "attention" || op == "grouped_attention"; }

// A contiguous copy of `input` in which every row's last element is zero (the loop stopped one short).
Tensor without_last_column(const Tensor& input) {
  Tensor wide = input.to(DType::F64);
  const int64_t columns = wide.size(-1);
  double* values = wide.data<double>();
  for (int64_t i = columns - 1; i < wide.numel(); i += columns) values[i] = 0;
  return wide.to(input.dtype());
}

// q with the 1/sqrt(D) the kernel applies undone, as if it had forgotten it.
Tensor unscaled_queries(const Tensor& q, const Attrs& attrs) {
  const double head_dim = static_cast<double>(q.size(-1) / attrs.get_int("n_head"));
  Tensor wide = q.to(DType::F64);
  double* values = wide.data<double>();
  for (int64_t i = 0; i < wide.numel(); ++i) values[i] *= std::sqrt(head_dim);
  return wide.to(q.dtype());
}

KernelFn planted(const std::string& op, const std::string& kind, KernelFn kernel) {
  if (kind == "eps" || (kind == "scale" && !is_attention(op))) {
    const std::string attr = kind;
    return [kernel, attr](const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
      if (!attrs.has(attr)) fail("{}: the op has no attr '{}' to get wrong", kVariable, attr);
      Attrs wrong = attrs;
      wrong.set(attr, attr == "eps" ? attrs.get_float(attr) * 10 : 1.0);
      kernel(inputs, outputs, wrong);
    };
  }
  if (kind == "scale") {
    return [kernel](const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
      Tensors unscaled = inputs;
      unscaled[0] = unscaled_queries(inputs[0], attrs);
      kernel(unscaled, outputs, attrs);
    };
  }
  if (kind == "offbyone") {
    return [kernel](const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
      Tensors shortened = inputs;
      shortened[0] = without_last_column(inputs[0]);
      kernel(shortened, outputs, attrs);
    };
  }
  fail("{}={}:{}: unknown kind '{}' (eps, scale or offbyone)", kVariable, op, kind, kind);
}

}  // namespace

void plant_test_fault(Backend& backend) {
  const char* value = std::getenv(kVariable);
  if (value == nullptr || *value == '\0') return;
  const std::string text = value;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) fail("{}='{}': expected <op>:<kind>", kVariable, text);
  const std::string op = text.substr(0, colon), kind = text.substr(colon + 1);
  int planted_kernels = 0;
  for (const auto& [name, dtype] : backend.kernels()) {  // a copy: the loop replaces entries
    if (name != op) continue;
    const bool emulated = backend.is_emulated(name, dtype);
    KernelFn kernel = planted(op, kind, *backend.find(name, dtype));
    backend.remove_kernel(name, dtype);
    if (emulated) {
      backend.add_emulated_kernel(name, dtype, kernel);
    } else {
      backend.add_kernel(name, dtype, kernel);
    }
    ++planted_kernels;
  }
  if (planted_kernels == 0) fail("{}='{}': backend '{}' has no kernel for op '{}'", kVariable, text, backend.name(), op);
}

}  // namespace strata
