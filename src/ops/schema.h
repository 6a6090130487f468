#pragma once
// The unified operator interface: an op is a schema (what it computes, how its
// output shapes follow from its inputs, what it costs); backends supply
// kernels for it per dtype.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/attrs.h"

namespace strata {

struct TensorMeta {
  Shape shape;
  DType dtype = DType::F32;
  size_t nbytes() const { return static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype); }
  bool operator==(const TensorMeta& other) const { return shape == other.shape && dtype == other.dtype; }
};

using Metas = std::vector<TensorMeta>;
using Tensors = std::vector<Tensor>;

// Kernels write into outputs the caller allocated with the inferred shapes.
// All tensors handed to kernels are contiguous.
using KernelFn = std::function<void(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs)>;

class Dispatcher;
// Computes an op with other ops, for backends that lack its kernel.
using DecomposeFn =
    std::function<void(Dispatcher& dispatcher, const Tensors& inputs, const Tensors& outputs, const Attrs& attrs)>;

struct OpSchema {
  std::string name;
  std::string summary;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> attrs;  // required attribute names
  size_t dtype_input = 0;          // the input whose dtype selects the kernel
  // Validates inputs and attributes (throwing an Error naming the op and the
  // offending input) and returns the output metadata.
  std::function<Metas(const Metas& inputs, const Attrs& attrs)> infer;
  // Floating-point operations of one call (a multiply-add counts as 2).
  std::function<double(const Metas& inputs, const Metas& outputs, const Attrs& attrs)> flops;
  // Bytes moved to and from memory by an ideal kernel; unset means every input
  // read once and every output written once.
  std::function<double(const Metas& inputs, const Metas& outputs, const Attrs& attrs)> bytes;
  DecomposeFn decompose;  // unset: no decomposition, fall back to `ref`
  // The ops `decompose` runs (same dtype as this op), for coverage reports.
  std::vector<std::string> decomposes_into;
  // In-place permission: (output, input) pairs whose output may take over the
  // input's buffer when no later node reads that input (the memory planner
  // does this only for equal sizes). Every kernel and decomposition of the op,
  // on every backend, must then be correct with the two aliased: element i of
  // the input is read before element i of the output is written, and no other
  // element of the input is read after that write.
  std::vector<std::pair<size_t, size_t>> may_reuse;
};

struct OpCost {
  double flops = 0;
  double bytes = 0;
};

class OpRegistry {
 public:
  // The process-wide registry, holding every standard op.
  static const OpRegistry& global();

  void add(OpSchema schema);
  const OpSchema& get(const std::string& name) const;  // throws naming the op
  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted

  Metas infer(const std::string& name, const Metas& inputs, const Attrs& attrs) const;
  OpCost cost(const std::string& name, const Metas& inputs, const Attrs& attrs) const;

 private:
  std::vector<OpSchema> schemas_;
};

Metas metas_of(const Tensors& tensors);

}  // namespace strata
