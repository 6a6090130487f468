#pragma once
// Communicators: the world and sub-groups split from it, each offering
// all_reduce (sum, avg, max), reduce_scatter, all_gather, broadcast,
// send/recv and barrier on f32 and bf16 buffers (all_gather, broadcast and
// send/recv move any dtype). Every call has a non-blocking *_async form that
// returns a Handle; the blocking form is the async one followed by wait().
//
// Rules for callers (as with MPI): every rank of a group makes the same
// collective calls in the same order with the same counts; buffers stay
// untouched until the call's handle is done; input and output are either the
// same buffer (in place) or do not overlap; use from one thread. Progress
// happens inside Handle::test()/wait() and any blocking call, so a rank that
// overlaps communication with compute must test now and then.
//
// Reductions accumulate in fp32 (bf16 inputs are widened and partial sums
// travel as fp32); every rank receives bit-identical results.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "comm/config.h"
#include "comm/cost_model.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace strata::comm {

class Operation;
struct GroupState;

// One call in flight. Destroying an unfinished handle waits for it.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<Operation> op);
  Handle(Handle&&) noexcept = default;
  Handle& operator=(Handle&& other) noexcept;
  ~Handle();

  // Drives every call in flight a little; true once this one is done.
  // Rethrows the call's error (a debug-check mismatch, for instance).
  bool test();
  void wait();
  bool valid() const { return op_ != nullptr; }

 private:
  void settle() noexcept;  // waits for an unfinished call, reporting instead of throwing
  std::shared_ptr<Operation> op_;
};

// What a call ran and why. `predicted_s` is the model's time (NaN for mpi).
struct Decision {
  Collective op = Collective::AllReduce;
  size_t bytes = 0;
  DType dtype = DType::F32;
  Algorithm algorithm = Algorithm::Ring;
  double predicted_s = 0.0;
  std::string reason;  // "auto", "requested by the call", "pinned by ...", "fallback: ..."
  std::vector<std::pair<Algorithm, double>> candidates;
};
std::string format_decision(const Decision& decision);

// Where the link figures came from: "probe", "cache <file>" or "file <file>".
struct LinkSource {
  std::string kind;
  std::string path;
};

class Communicator {
 public:
  Communicator() = default;

  // All ranks (collective over MPI_COMM_WORLD; MPI must be initialised).
  // Finds the ranks per node, then takes the link figures from
  // config.topology_file, or the probe cache, or a fresh probe.
  static Communicator world(const CommConfig& config = CommConfig::from_environment());

  // Collective over this group: ranks with the same color (>= 0) form a new
  // group, ordered by key then by rank. `name` labels it in errors and logs.
  Communicator split(int color, int key, const std::string& name) const;

  bool valid() const { return state_ != nullptr; }
  int rank() const;
  int size() const;
  const std::string& name() const;
  int world_rank_of(int rank) const;
  std::string hostname_of(int rank) const;
  int node_of(int rank) const;  // node index within this group, 0 .. nodes-1
  int nodes() const;
  const TopologyDesc& topology() const;  // as the cost model sees this group
  const ModelOptions& model() const;
  const LinkSource& link_source() const;
  const CommConfig& config() const;

  // What the call would run, without running it. `count` is nccl-tests'
  // element count (the whole buffer; for all_gather the whole output).
  Decision plan(Collective op, size_t count, DType dtype, Algorithm requested = Algorithm::Auto) const;
  // The latest collective's decision (its candidates only when decisions are logged).
  const Decision& last_decision() const;

  // out = reduction over ranks of in; in == out is in place.
  Handle all_reduce_async(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                          Algorithm algorithm = Algorithm::Auto);
  // in holds size() * count elements; out gets this rank's block of count.
  Handle reduce_scatter_async(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                              Algorithm algorithm = Algorithm::Auto);
  // in holds count elements; out gets size() * count, rank i's at i * count.
  Handle all_gather_async(const void* in, void* out, size_t count, DType dtype,
                          Algorithm algorithm = Algorithm::Auto);
  Handle broadcast_async(void* data, size_t count, DType dtype, int root, Algorithm algorithm = Algorithm::Auto);
  // Any dtype; in and out must not overlap. all_to_all: in holds size() blocks
  // of count elements, block j for rank j; out gets block i from rank i.
  Handle all_to_all_async(const void* in, void* out, size_t count, DType dtype, Algorithm algorithm = Algorithm::Auto);
  // in holds send_counts[j] elements for each rank j, packed in rank order; out
  // gets recv_counts[i] elements from each rank i, packed in rank order. Each
  // pair must agree (recv_counts[i] here is send_counts[rank()] on rank i):
  // all_to_all_counts learns recv_counts when only the senders know them.
  // The algorithm is chosen from the topology alone (ranks cannot agree on
  // sizes they do not know); the counts are copied.
  Handle all_to_all_v_async(const void* in, std::span<const size_t> send_counts, void* out,
                            std::span<const size_t> recv_counts, DType dtype, Algorithm algorithm = Algorithm::Auto);
  Handle send_async(const void* data, size_t count, DType dtype, int peer);
  Handle recv_async(void* data, size_t count, DType dtype, int peer);
  Handle barrier_async();

  void all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                  Algorithm algorithm = Algorithm::Auto) {
    all_reduce_async(in, out, count, dtype, op, algorithm).wait();
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                      Algorithm algorithm = Algorithm::Auto) {
    reduce_scatter_async(in, out, count, dtype, op, algorithm).wait();
  }
  void all_gather(const void* in, void* out, size_t count, DType dtype, Algorithm algorithm = Algorithm::Auto) {
    all_gather_async(in, out, count, dtype, algorithm).wait();
  }
  void broadcast(void* data, size_t count, DType dtype, int root, Algorithm algorithm = Algorithm::Auto) {
    broadcast_async(data, count, dtype, root, algorithm).wait();
  }
  void all_to_all(const void* in, void* out, size_t count, DType dtype, Algorithm algorithm = Algorithm::Auto) {
    all_to_all_async(in, out, count, dtype, algorithm).wait();
  }
  void all_to_all_v(const void* in, std::span<const size_t> send_counts, void* out, std::span<const size_t> recv_counts,
                    DType dtype, Algorithm algorithm = Algorithm::Auto) {
    all_to_all_v_async(in, send_counts, out, recv_counts, dtype, algorithm).wait();
  }
  // The counts every rank sends this one (an all_to_all of one count per rank).
  std::vector<size_t> all_to_all_counts(std::span<const size_t> send_counts);
  void send(const void* data, size_t count, DType dtype, int peer) { send_async(data, count, dtype, peer).wait(); }
  void recv(void* data, size_t count, DType dtype, int peer) { recv_async(data, count, dtype, peer).wait(); }
  void barrier() { barrier_async().wait(); }

  // Tensors (contiguous): in-place all_reduce and broadcast; all_gather and
  // reduce_scatter along the flattened element order.
  Handle all_reduce_async(Tensor& tensor, ReduceOp op);
  void all_reduce(Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }
  void broadcast(Tensor& tensor, int root);
  void all_gather(const Tensor& in, Tensor& out);
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op);

 private:
  explicit Communicator(std::shared_ptr<GroupState> state) : state_(std::move(state)) {}
  const GroupState& state() const;
  GroupState& state();
  std::shared_ptr<GroupState> state_;
};

}  // namespace strata::comm
