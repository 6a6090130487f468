#pragma once
// The groups that collective ops (collective_ops.cpp) combine values over,
// by name: "dp", "tp", "pp". The parallel runtime registers them, backed by
// the comm layer; ops and backends see only this interface (as a backend is a
// table of kernels, a group is three calls). A name nobody registered is a
// group of one rank: one process runs a graph with collectives unchanged.
#include <cstddef>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "ops/schema.h"

namespace strata {

class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  virtual int size() const = 0;
  // data = the element-wise sum over the group's ranks of their `data`, the
  // same bits on every rank (blocking; every rank of the group calls it in
  // the same order).
  virtual void all_reduce_sum(void* data, size_t count, DType dtype) = 0;
};

// Replaces any group of that name; nullptr unregisters it.
void register_collective_group(const std::string& name, std::shared_ptr<CollectiveGroup> group);
// The group registered under `name`, or a group of one rank.
CollectiveGroup& collective_group(const std::string& name);

// The kernels of the collective ops, the same on every backend (the work is
// the group's): all_reduce sums `x` over the group; copy_to_group copies it.
void all_reduce_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void copy_to_group_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);

}  // namespace strata
