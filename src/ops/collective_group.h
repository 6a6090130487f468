#pragma once
// The groups that collective ops (collective_ops.cpp) combine values over,
// by name: "dp", "tp", "pp". The parallel runtime registers them, backed by
// the comm layer; ops and backends see only this interface (as a backend is a
// table of kernels, a group is three calls). A name nobody registered is a
// group of one rank: one process runs a graph with collectives unchanged.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "ops/schema.h"

namespace strata {

// A pipeline's two transfer flows (attr `flow` of send_to_stage and
// receive_from_stage): activations go forward, their gradients come back.
enum class StageFlow { Activations, Gradients };
std::string_view stage_flow_name(StageFlow flow);  // "activations", "gradients"
// Attr `flow` of op `op`; fails naming the op and the value.
StageFlow parse_stage_flow(const std::string& op, const Attrs& attrs);

class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // Blocking; every rank of the group makes the same calls in the same order.
  // data = the element-wise sum over the ranks of their `data`, the same bits on every rank.
  virtual void all_reduce_sum(void* data, size_t count, DType dtype) = 0;
  // out (size() * bytes) = every rank's `bytes` of `in`, rank r's at r * bytes.
  virtual void all_gather_bytes(const void* in, void* out, size_t bytes) = 0;
  // in holds size() blocks of count elements; out = the sum over the ranks of block rank().
  virtual void reduce_scatter_sum(const void* in, void* out, size_t count, DType dtype) = 0;
  // in and out hold size() blocks of `bytes` each: block j of in goes to rank j, out's block i came
  // from rank i (expert parallelism's token exchange); in and out do not overlap.
  virtual void all_to_all_bytes(const void* in, void* out, size_t bytes) = 0;
  // The same with blocks of any size: send_bytes[j] of in (packed in rank order) go to rank j,
  // recv_bytes[i] from rank i land packed in rank order in out; each pair of ranks agrees on its
  // sizes (expert parallelism learns them first with all_to_all_bytes).
  virtual void all_to_all_v_bytes(const void* in, std::span<const size_t> send_bytes, void* out,
                                  std::span<const size_t> recv_bytes) = 0;
  // A pipeline's stage boundary. send_bytes sends `bytes` of `data` to rank
  // `peer` on `flow` without waiting (from a copy the group keeps until
  // finish_sends); receive_bytes waits for `bytes` from `peer` on `flow`.
  // Each flow between two ranks delivers in the order sent.
  virtual void send_bytes(const void* data, size_t bytes, int peer, StageFlow flow) = 0;
  virtual void receive_bytes(void* data, size_t bytes, int peer, StageFlow flow) = 0;
  // Waits until every send has left; returns the seconds waited.
  virtual double finish_sends() = 0;
};

// Replaces any group of that name; nullptr unregisters it.
void register_collective_group(const std::string& name, std::shared_ptr<CollectiveGroup> group);
// The group registered under `name`, or a group of one rank.
CollectiveGroup& collective_group(const std::string& name);
// The group op `op`'s attr `group` names; fails, naming the op, unless its size is attr `ranks`
// (the group size the graph was built for).
CollectiveGroup& collective_group_of(const std::string& op, const Attrs& attrs);

// The kernels of the collective ops, the same on every backend (the work is
// the group's): all_reduce sums `x` over the group; copy_to_group copies it;
// all_gather concatenates the ranks' `x` along attr `dim`; reduce_scatter
// sums `x` over the ranks and keeps this rank's block along `dim`;
// split_to_group keeps this rank's block of `x` along `dim` (no communication);
// all_to_all sends block j of `x` along `dim` to rank j and puts the block from rank i at i;
// send_to_stage sends `x` to stage `peer` and passes it through;
// receive_from_stage receives into `out` (`x` only stands for the sent value).
void all_reduce_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void copy_to_group_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void all_gather_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void reduce_scatter_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void split_to_group_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void all_to_all_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void send_to_stage_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void receive_from_stage_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);

}  // namespace strata
