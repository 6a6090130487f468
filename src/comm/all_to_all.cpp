// All-to-all over MPI point-to-point: the flat pairwise exchange and the
// two-level ones built from it (uniform blocks, and uneven counts).
#include <algorithm>
#include <cstring>

#include "comm/algorithms.h"
#include "comm/scratch.h"

namespace strata::comm {
namespace {

// Messages a block needs (an empty block still sends one: the receiver checks its size).
size_t messages(uint64_t bytes) { return bytes == 0 ? 1 : (bytes + kMaxMessageBytes - 1) / kMaxMessageBytes; }

// The group rank at (node, position): ranks of a node in rank order, as the channels were split.
std::vector<std::vector<int>> members_by_node(const std::vector<int>& node_of_rank, size_t nodes) {
  std::vector<std::vector<int>> members(nodes);
  for (size_t rank = 0; rank < node_of_rank.size(); ++rank) {
    members[static_cast<size_t>(node_of_rank[rank])].push_back(static_cast<int>(rank));
  }
  return members;
}

// Packed byte layout of per-peer byte counts.
ExchangeLayout byte_layout(const std::vector<size_t>& send_bytes, const std::vector<size_t>& recv_bytes) {
  return ExchangeLayout::packed(send_bytes, recv_bytes, static_cast<int>(send_bytes.size()), "hierarchical all_to_all_v");
}

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
  const std::vector<std::vector<int>> members = members_by_node(node_of_rank, nodes);
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

Task hierarchical_all_to_all_v(Context local, Context column, const std::vector<int>& node_of_rank, const void* in,
                               void* out, const ExchangeLayout& layout, size_t width) {
  const size_t positions = static_cast<size_t>(local.size());
  const size_t nodes = static_cast<size_t>(column.size());
  const std::vector<std::vector<int>> members = members_by_node(node_of_rank, nodes);
  auto rank_at = [&](size_t node, size_t position) { return static_cast<size_t>(members[node][position]); };
  auto sent_to = [&](size_t rank) { return layout.send[rank].count * width; };
  auto received_from = [&](size_t rank) { return layout.recv[rank].count * width; };
  const auto* source = static_cast<const std::byte*>(in);
  auto* target = static_cast<std::byte*>(out);
  // 0. Inside the node: each local rank learns what every local peer sends to the ranks at its position.
  std::vector<uint64_t> mine(positions * nodes), theirs(positions * nodes);
  for (size_t l = 0; l < positions; ++l) {
    for (size_t m = 0; m < nodes; ++m) mine[l * nodes + m] = sent_to(rank_at(m, l));
  }
  co_await pairwise_all_to_all(local, mine.data(), theirs.data(), ExchangeLayout::uniform(nodes, local.size()),
                               sizeof(uint64_t));
  // 1. Inside the node: local rank l gets the blocks for position l on every node, node by node.
  std::vector<size_t> to_local(positions, 0), from_local(positions, 0), to_node(nodes, 0), from_node(nodes, 0);
  for (size_t l = 0; l < positions; ++l) {
    for (size_t m = 0; m < nodes; ++m) {
      to_local[l] += mine[l * nodes + m];
      from_local[l] += theirs[l * nodes + m];
      to_node[m] += theirs[l * nodes + m];
      from_node[m] += received_from(rank_at(m, l));
    }
  }
  const ExchangeLayout inside = byte_layout(to_local, from_local);
  ScratchPool::Lease staging = ScratchPool::instance().acquire(std::max<uint64_t>(inside.send_total(), 1));
  for (size_t l = 0, at = 0; l < positions; ++l) {
    for (size_t m = 0; m < nodes; ++m) {
      const size_t rank = rank_at(m, l);
      std::memcpy(staging.bytes() + at, source + layout.send[rank].offset * width, sent_to(rank));
      at += sent_to(rank);
    }
  }
  ScratchPool::Lease landing = ScratchPool::instance().acquire(std::max<uint64_t>(inside.recv_total(), 1));
  co_await pairwise_all_to_all(local, staging.bytes(), landing.bytes(), inside, 1);
  // 2. Along the column: node m gets, from every local peer q in position order, q's block for (m, this position).
  const ExchangeLayout across = byte_layout(to_node, from_node);
  ScratchPool::Lease column_staging = ScratchPool::instance().acquire(std::max<uint64_t>(across.send_total(), 1));
  std::vector<size_t> node_at(nodes, 0);  // where node m's part goes in column_staging
  for (size_t m = 1; m < nodes; ++m) node_at[m] = node_at[m - 1] + to_node[m - 1];
  for (size_t q = 0, at = 0; q < positions; ++q) {
    for (size_t m = 0; m < nodes; ++m) {
      const size_t bytes = theirs[q * nodes + m];
      std::memcpy(column_staging.bytes() + node_at[m], landing.bytes() + at, bytes);
      node_at[m] += bytes;
      at += bytes;
    }
  }
  ScratchPool::Lease column_landing = ScratchPool::instance().acquire(std::max<uint64_t>(across.recv_total(), 1));
  co_await pairwise_all_to_all(column, column_staging.bytes(), column_landing.bytes(), across, 1);
  // 3. From node n, the blocks of its ranks in position order: each to its sender's place in the output.
  for (size_t n = 0, at = 0; n < nodes; ++n) {
    for (size_t q = 0; q < positions; ++q) {
      const size_t rank = rank_at(n, q);
      std::memcpy(target + layout.recv[rank].offset * width, column_landing.bytes() + at, received_from(rank));
      at += received_from(rank);
    }
  }
}

}  // namespace strata::comm
