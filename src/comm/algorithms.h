#pragma once
// The collective algorithms, over MPI point-to-point. Each is a coroutine
// (see task.h) run by one Operation; all handle any group size, including
// non-powers of two, and any count, including 0 and counts below the group
// size. Internal to comm/: callers go through Communicator.
#include <cstddef>

#include "comm/call_check.h"
#include "comm/collective.h"
#include "comm/engine.h"
#include "comm/exchange_layout.h"
#include "core/dtype.h"

namespace strata::comm {

struct GroupState;
class SharedSegment;

struct Context {
  Operation& op;
  const Channel& channel;
  int tag;
  size_t chunk_bytes;  // pipelined algorithms move chunks of this size
  int depth;           // chunks in flight per direction
  int rank() const { return channel.rank; }
  int size() const { return channel.size; }
};

// Where a reduction reads and writes. Contributions and partial sums are
// fp32 whole buffers; results are written in out_dtype. For reduce_scatter,
// `out` is this rank's block; otherwise the whole buffer.
struct ReduceBuffers {
  const float* own = nullptr;  // this rank's contribution
  float* partial = nullptr;    // storage for partial sums; may alias own
  void* out = nullptr;
  DType out_dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;  // Sum or Max (avg is Sum with divisor = group size)
  float divisor = 1.0f;
};

// Sends and receives (either may be absent: peer -1 or 0 bytes) and returns
// when both are done; transfers above kMaxMessageBytes are split.
Task exchange(Context ctx, int to, const void* send_data, size_t send_bytes, int from, void* recv_data,
              size_t recv_bytes);

// Ring: chunked and pipelined; all_reduce is reduce-scatter then all-gather
// in one stream, so the first gathered chunk leaves while later chunks are
// still being reduced.
// The ring's blocks are the even split of `count` (BlockLayout), so they may
// differ by one element: reduce_scatter writes this rank's block to `out`;
// all_gather starts with this rank's block of `data` in place.
Task ring_all_reduce(Context ctx, ReduceBuffers buffers, size_t count);
Task ring_reduce_scatter(Context ctx, ReduceBuffers buffers, size_t count);
Task ring_all_gather(Context ctx, void* data, size_t count, size_t width);
Task ring_broadcast(Context ctx, void* data, size_t bytes, int root);  // pipelined chain

// Rabenseifner: reduce-scatter by recursive halving, all-gather by recursive doubling.
Task rhd_all_reduce(Context ctx, ReduceBuffers buffers, size_t count);
// reduce_scatter and all_gather below move size() equal blocks of block_count
// elements (or block_bytes bytes), this rank's block being block rank().
Task rhd_reduce_scatter(Context ctx, ReduceBuffers buffers, size_t block_count);
// Recursive doubling: whole-buffer exchanges (all_reduce), doubling ranges (all_gather).
Task rd_all_reduce(Context ctx, ReduceBuffers buffers, size_t count);
Task rd_all_gather(Context ctx, void* data, size_t block_bytes);

// Binomial tree: reduce to rank 0 then broadcast back (all_reduce); broadcast.
Task binomial_all_reduce(Context ctx, ReduceBuffers buffers, size_t count);
Task binomial_broadcast(Context ctx, void* data, size_t bytes, int root);

// Two levels: ring reduce-scatter inside the node, `across` all-reduce of each
// local rank's part between nodes (every local rank drives its own column),
// ring all-gather inside the node.
Task hierarchical_all_reduce(Context local, Context column, ReduceBuffers buffers, size_t count,
                             Algorithm across);

// Shared memory (one-host groups with a segment): each rank copies its
// contribution once and sums everyone's copies into its output.
// The one-host algorithms carry the call's fingerprint beside their data and
// compare it there (no separate check).
Task shm_all_reduce(Context ctx, GroupState* group, Fingerprint call, ReduceBuffers buffers, size_t count);
// Direct read (one-host groups that may read each other's memory): each rank
// reads the others' `input` (of input_dtype) and sums everything itself.
Task direct_all_reduce(Context ctx, GroupState* group, Fingerprint call, const void* input, DType input_dtype,
                       ReduceBuffers buffers, size_t count);

// All-to-all: every rank's layout.send blocks of `in` land in the receivers'
// layout.recv blocks of `out` (elements of `width` bytes; in and out disjoint).
// Pairwise over MPI: every exchange posted at once, rank r + k's block sent
// and rank r - k's received at step k, so each pair's messages meet early.
Task pairwise_all_to_all(Context ctx, const void* in, void* out, const ExchangeLayout& layout, size_t width);
// Pairwise on one host: each rank stages its small blocks in its exchange
// area and leaves the others in its input; receivers copy the staged ones and
// read the rest straight from the senders' inputs (cross-memory attach, one
// copy). Ranks meet on entry, and at the end only when a peer read a
// sender's input.
Task direct_all_to_all(Context ctx, GroupState* group, Fingerprint call, const void* in, void* out,
                       const ExchangeLayout& layout, size_t width);
// The direct reads' reduction: this rank's elements [first, first + length)
// summed over every rank's input (peers' copied from their exchange areas
// where they staged it, else read from their call headers' addresses; fp32 or
// bf16) into its output, chunk by chunk, in rank order.
// copy_own: this rank's own chunk is copied first (its output may alias it).
void reduce_from_peers(const Context& ctx, const SharedSegment& segment, const ReduceBuffers& buffers, size_t first,
                       size_t length, bool copy_own, bool streaming);
// Copies `bytes` of this rank's input into its exchange area when the area
// has room for them and `extra` bytes more; returns whether it did. Peers then
// copy from shared memory instead of reading the input by cross-memory attach
// (two copies beat one such read here: see kDefaultStagingBytes).
bool stage_input(SharedSegment& segment, int me, const void* input, size_t bytes, size_t extra = 0);
// Direct read, split (three or more ranks pay off): each rank reduces its
// BlockLayout slice from everyone's `input` into its output, then, once every
// slice is reduced, reads the others' reduced slices from their outputs (or,
// where the inputs were staged, from the owners' exchange areas).
Task direct_split_all_reduce(Context ctx, GroupState* group, Fingerprint call, const void* input, DType input_dtype,
                             ReduceBuffers buffers, size_t count);
// The start of a one-host call that publishes a call header: waits for its
// turn on the segment (calls take it in call order), then for the peers still
// reading this rank's header or exchange area for its latest staged exchange.
Task take_segment_for_header(Context ctx, GroupState* group);
// Two levels, uniform blocks of `block_bytes`: an all-to-all inside the node
// hands each local rank the blocks for its column (its position on every
// node), an all-to-all along the column delivers them, and one copy puts them
// in sender order. Between nodes each rank sends nodes - 1 messages, not
// ranks - ranks_per_node.
Task hierarchical_all_to_all(Context local, Context column, const std::vector<int>& node_of_rank, const void* in,
                             void* out, size_t block_bytes);
// The same with uneven counts (all_to_all_v): the local ranks first trade the
// sizes of the blocks they will forward for each other (nodes counts per
// pair), then the two exchanges carry each block once inside the node and
// once between nodes, and one copy puts them at their senders' places.
Task hierarchical_all_to_all_v(Context local, Context column, const std::vector<int>& node_of_rank, const void* in,
                               void* out, const ExchangeLayout& layout, size_t width);

// The MPI library's own non-blocking collectives (MPI_Iallreduce, ...).
Task mpi_all_reduce(Context ctx, ReduceBuffers buffers, size_t count);
Task mpi_reduce_scatter(Context ctx, ReduceBuffers buffers, size_t block_count);
Task mpi_all_gather(Context ctx, void* data, size_t block_bytes);
Task mpi_broadcast(Context ctx, void* data, size_t bytes, int root);
Task mpi_all_to_all(Context ctx, const void* in, void* out, const ExchangeLayout& layout, size_t width);

// Runs the all-reduce `algorithm` (not Hierarchical, not Auto) on one channel.
Task flat_all_reduce(Context ctx, Algorithm algorithm, ReduceBuffers buffers, size_t count);

// Dissemination barrier: ceil(lg p) rounds of empty messages.
Task dissemination_barrier(Context ctx);

}  // namespace strata::comm
