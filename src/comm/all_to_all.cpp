// All-to-all over MPI point-to-point: the flat pairwise exchange and the
// two-level one built from it.
#include <cstring>

#include "comm/algorithms.h"
#include "comm/scratch.h"

namespace strata::comm {
namespace {

// Messages a block needs (an empty block still sends one: the receiver checks its size).
size_t messages(uint64_t bytes) { return bytes == 0 ? 1 : (bytes + kMaxMessageBytes - 1) / kMaxMessageBytes; }

}  // namespace

Task pairwise_all_to_all(Context ctx, const void* in, void* out, const ExchangeLayout& layout, size_t width) {
  const int p = ctx.size();
  const int me = ctx.rank();
  const auto* source = static_cast<const std::byte*>(in);
  auto* target = static_cast<std::byte*>(out);
  const auto& own = layout.send[static_cast<size_t>(me)];
  std::memcpy(target + layout.recv[static_cast<size_t>(me)].offset * width, source + own.offset * width,
              own.count * width);
  if (p == 1) co_return;
  size_t slots = 0;
  for (int k = 1; k < p; ++k) {
    slots += messages(layout.recv[static_cast<size_t>((me - k + p) % p)].count * width);
    slots += messages(layout.send[static_cast<size_t>((me + k) % p)].count * width);
  }
  RequestSet requests(ctx.op, ctx.channel, ctx.tag, slots);
  size_t slot = 0;
  // Receives first, in step order, so that most messages find theirs posted.
  for (int k = 1; k < p; ++k) {
    int from = (me - k + p) % p;
    const auto& block = layout.recv[static_cast<size_t>(from)];
    uint64_t bytes = block.count * width;
    for (uint64_t done = 0, n = messages(bytes); n > 0; --n, done += kMaxMessageBytes) {
      requests.recv(slot++, target + block.offset * width + done, std::min<uint64_t>(bytes - done, kMaxMessageBytes), from);
    }
  }
  for (int k = 1; k < p; ++k) {
    int to = (me + k) % p;
    const auto& block = layout.send[static_cast<size_t>(to)];
    uint64_t bytes = block.count * width;
    for (uint64_t done = 0, n = messages(bytes); n > 0; --n, done += kMaxMessageBytes) {
      requests.send(slot++, source + block.offset * width + done, std::min<uint64_t>(bytes - done, kMaxMessageBytes), to);
    }
  }
  co_await requests.all();
}

Task hierarchical_all_to_all(Context local, Context column, const std::vector<int>& node_of_rank, const void* in,
                             void* out, size_t block_bytes) {
  const size_t positions = static_cast<size_t>(local.size());
  const size_t nodes = static_cast<size_t>(column.size());
  // The group rank at (node, position): ranks of a node in rank order, as the channels were split.
  std::vector<std::vector<int>> members(nodes);
  for (size_t rank = 0; rank < node_of_rank.size(); ++rank) {
    members[static_cast<size_t>(node_of_rank[rank])].push_back(static_cast<int>(rank));
  }
  const auto* source = static_cast<const std::byte*>(in);
  auto* target = static_cast<std::byte*>(out);
  const size_t total = positions * nodes * block_bytes;
  ScratchPool::Lease staging = ScratchPool::instance().acquire(total);
  ScratchPool::Lease landing = ScratchPool::instance().acquire(total);
  auto block = [&](const ScratchPool::Lease& lease, size_t index) { return lease.bytes() + index * block_bytes; };
  auto rank_at = [&](size_t node, size_t position) {
    return static_cast<size_t>(members[node][position]);
  };
  // 1. Inside the node: local rank l gets the blocks for position l on every node.
  for (size_t l = 0; l < positions; ++l) {
    for (size_t m = 0; m < nodes; ++m) std::memcpy(block(staging, l * nodes + m), source + rank_at(m, l) * block_bytes, block_bytes);
  }
  const ExchangeLayout inside = ExchangeLayout::uniform(nodes * block_bytes, local.size());
  co_await pairwise_all_to_all(local, staging.bytes(), landing.bytes(), inside, 1);
  // 2. Along the column: node m gets, from every local rank, the block for this rank's position there.
  for (size_t m = 0; m < nodes; ++m) {
    for (size_t l = 0; l < positions; ++l) std::memcpy(block(staging, m * positions + l), block(landing, l * nodes + m), block_bytes);
  }
  const ExchangeLayout across = ExchangeLayout::uniform(positions * block_bytes, column.size());
  co_await pairwise_all_to_all(column, staging.bytes(), landing.bytes(), across, 1);
  // 3. landing holds the block of (node m, position l) at m * positions + l: into sender order.
  for (size_t m = 0; m < nodes; ++m) {
    for (size_t l = 0; l < positions; ++l) std::memcpy(target + rank_at(m, l) * block_bytes, block(landing, m * positions + l), block_bytes);
  }
}

}  // namespace strata::comm
