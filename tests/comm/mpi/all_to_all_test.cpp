// all_to_all and all_to_all_v: every algorithm, every dtype, odd, empty and
// lopsided counts, against a reference each rank computes alone from the
// count matrix and everyone's inputs (a hash of sender, element and byte).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "comm/exchange_tally.h"
#include "mpi/comm_test_support.h"

namespace strata::comm::testing {
namespace {

const std::vector<DType> kAllDtypes = {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64};

// Byte `byte` of element `index` of `rank`'s send buffer.
std::byte input_byte(int rank, size_t index, size_t byte) {
  return static_cast<std::byte>((rank * 131 + index * 31 + byte * 7 + 5) % 251);
}

std::vector<std::byte> send_buffer(int rank, size_t elements, size_t width) {
  std::vector<std::byte> buffer(elements * width);
  for (size_t i = 0; i < elements; ++i) {
    for (size_t b = 0; b < width; ++b) buffer[i * width + b] = input_byte(rank, i, b);
  }
  return buffer;
}

// counts(from, to): elements rank `from` sends rank `to`.
using CountMatrix = std::function<size_t(int, int)>;

// What rank `me` must hold: the block of every sender, in sender order, at the
// sender's packed offset for `me`.
std::vector<std::byte> expected_output(const CountMatrix& counts, int ranks, int me, size_t width) {
  std::vector<std::byte> out;
  for (int from = 0; from < ranks; ++from) {
    size_t first = 0;
    for (int to = 0; to < me; ++to) first += counts(from, to);
    for (size_t i = 0; i < counts(from, me); ++i) {
      for (size_t b = 0; b < width; ++b) out.push_back(input_byte(from, first + i, b));
    }
  }
  return out;
}

std::vector<Algorithm> exchange_algorithms(Collective op, const Communicator& group) {
  std::vector<Algorithm> result = {Algorithm::Auto};
  for (Algorithm algorithm : kConcreteAlgorithms) {
    if (implements(algorithm, op) && applicable(algorithm, {op, 1024.0}, group.topology())) result.push_back(algorithm);
  }
  return result;
}

TEST(AllToAll, EveryAlgorithmDtypeAndCountMatchesTheReference) {
  for (Communicator* group : test_groups()) {
    const int p = group->size(), me = group->rank();
    for (Algorithm algorithm : exchange_algorithms(Collective::AllToAll, *group)) {
      for (DType dtype : kAllDtypes) {
        const size_t width = dtype_size(dtype);
        for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{257}, size_t{4099}}) {
          std::vector<std::byte> in = send_buffer(me, count * static_cast<size_t>(p), width);
          std::vector<std::byte> out(in.size(), std::byte{0xee});
          group->all_to_all(in.data(), out.data(), count, dtype, algorithm);
          auto uniform = [&](int, int) { return count; };
          EXPECT_EQ(out, expected_output(uniform, p, me, width))
              << fmt::format("group '{}' ({} ranks, {} nodes) {} {} count {}", group->name(), p, group->nodes(),
                             algorithm_name(algorithm), dtype_name(dtype), count);
        }
      }
    }
  }
}

struct Case {
  std::string name;
  CountMatrix counts;
};

std::vector<Case> uneven_cases(int p) {
  const size_t big = test_config().exchange_staging_bytes / 8 + 1;
  return {
      {"odd sizes, some empty", [](int from, int to) { return static_cast<size_t>((from * 7 + to * 3) % 5) * 13; }},
      {"all empty", [](int, int) { return size_t{0}; }},
      {"rank 0 sends everything", [](int from, int to) { return from == 0 ? size_t{1000} + static_cast<size_t>(to) : 0; }},
      {"everything to the last rank", [p](int from, int to) { return to == p - 1 ? size_t{999} + static_cast<size_t>(from) : 0; }},
      {"one element each", [](int, int) { return size_t{1}; }},
      // On one host a sender stages blocks while its exchange area has room
      // (test_config's 2 MiB, of which the first 1 MiB is touched at the start)
      // and leaves the rest in its input: 2-byte elements stage at once,
      // 4-byte ones after the area grows, 8-byte ones stay in the input beside
      // staged small blocks; a sender whose blocks exceed test_config's 3 MiB
      // staging limit (4-byte elements from 7 ranks, 8-byte ones from 5) stages none.
      {"blocks past the staging area beside small ones",
       [big](int from, int to) { return (from + to) % 2 == 0 ? big : size_t{17}; }},
  };
}

TEST(AllToAllV, UnevenCountsMatchTheReference) {
  for (Communicator* group : test_groups()) {
    const int p = group->size(), me = group->rank();
    for (Algorithm algorithm : exchange_algorithms(Collective::AllToAllV, *group)) {
      for (DType dtype : kAllDtypes) {
        const size_t width = dtype_size(dtype);
        for (const Case& c : uneven_cases(p)) {
          std::vector<size_t> send_counts, recv_counts;
          for (int peer = 0; peer < p; ++peer) {
            send_counts.push_back(c.counts(me, peer));
            recv_counts.push_back(c.counts(peer, me));
          }
          size_t sent = 0;
          for (size_t n : send_counts) sent += n;
          std::vector<std::byte> in = send_buffer(me, sent, width);
          std::vector<std::byte> want = expected_output(c.counts, p, me, width);
          std::vector<std::byte> out(want.size() + 1, std::byte{0xee});
          group->all_to_all_v(in.data(), send_counts, out.data(), recv_counts, dtype, algorithm);
          EXPECT_EQ(out.back(), std::byte{0xee}) << "wrote past the received elements";
          out.pop_back();
          EXPECT_EQ(out, want) << fmt::format("group '{}' ({} ranks, {} nodes) {} {} {}", group->name(), p,
                                              group->nodes(), algorithm_name(algorithm), dtype_name(dtype), c.name);
        }
      }
    }
  }
}

// A rank's own block from 4 MiB up is copied with streaming stores; here it
// lands after the smaller blocks of lower ranks, off any 64-byte boundary,
// and ends past the last whole 64 bytes.
TEST(AllToAllV, OwnBlocksPastTheStreamedCopySize) {
  Communicator& world = flat_world();
  const int p = world.size(), me = world.rank();
  const size_t width = dtype_size(DType::F32);
  const size_t own = (size_t{4} << 20) / width + 3;
  auto counts = [own](int from, int to) { return from == to ? own : size_t{5}; };
  std::vector<size_t> send_counts, recv_counts;
  for (int peer = 0; peer < p; ++peer) {
    send_counts.push_back(counts(me, peer));
    recv_counts.push_back(counts(peer, me));
  }
  std::vector<std::byte> in = send_buffer(me, own + static_cast<size_t>(p - 1) * 5, width);
  std::vector<std::byte> want = expected_output(counts, p, me, width);
  std::vector<std::byte> out(want.size(), std::byte{0xee});
  world.all_to_all_v(in.data(), send_counts, out.data(), recv_counts, DType::F32, Algorithm::Auto);
  EXPECT_EQ(out, want);
}

// comm-bench labels its rows from this tally: each sender counts every block
// it sends a peer that is not empty once, staged or read.
TEST(AllToAllV, TheTallyCountsEveryPeerBlockOnce) {
  Communicator& world = flat_world();
  const int p = world.size(), me = world.rank();
  auto counts = [](int from, int to) { return (from + to) % 3 == 0 ? size_t{0} : size_t{1000} + static_cast<size_t>(to); };
  std::vector<size_t> send_counts, recv_counts;
  uint64_t peer_blocks = 0;
  for (int peer = 0; peer < p; ++peer) {
    send_counts.push_back(counts(me, peer));
    recv_counts.push_back(counts(peer, me));
    peer_blocks += peer != me && counts(me, peer) > 0 ? 1 : 0;
  }
  size_t sent = 0, received = 0;
  for (int peer = 0; peer < p; ++peer) sent += send_counts[static_cast<size_t>(peer)];
  for (int peer = 0; peer < p; ++peer) received += recv_counts[static_cast<size_t>(peer)];
  std::vector<std::byte> in = send_buffer(me, sent, 4), out(received * 4);
  const bool direct = p > 1 && world.topology().nodes == 1 && world.topology().cross_memory;
  ExchangeTallies::take();
  world.all_to_all_v(in.data(), send_counts, out.data(), recv_counts, DType::F32, Algorithm::Pairwise);
  const ExchangeTally tally = ExchangeTallies::take();
  EXPECT_EQ(tally.staged + tally.read, direct ? peer_blocks : 0) << "staged " << tally.staged << ", read " << tally.read;
  EXPECT_EQ(out, expected_output(counts, p, me, 4));
}

TEST(AllToAllV, CountsLearnedFromTheSenders) {
  Communicator& world = flat_world();
  const int p = world.size(), me = world.rank();
  auto counts = [](int from, int to) { return static_cast<size_t>(from * 3 + to + 1); };
  std::vector<size_t> send_counts;
  for (int peer = 0; peer < p; ++peer) send_counts.push_back(counts(me, peer));
  std::vector<size_t> recv_counts = world.all_to_all_counts(send_counts);
  for (int peer = 0; peer < p; ++peer) EXPECT_EQ(recv_counts[static_cast<size_t>(peer)], counts(peer, me));
  size_t sent = 0;
  for (size_t n : send_counts) sent += n;
  std::vector<std::byte> in = send_buffer(me, sent, 4);
  std::vector<std::byte> want = expected_output(counts, p, me, 4);
  std::vector<std::byte> out(want.size());
  world.all_to_all_v(in.data(), send_counts, out.data(), recv_counts, DType::F32);
  EXPECT_EQ(out, want);
}

TEST(AllToAll, BadArgumentsThrowBeforeAnyMessage) {
  Communicator& world = flat_world();
  const size_t p = static_cast<size_t>(world.size());
  std::vector<float> buffer(4 * p);
  EXPECT_THROW(world.all_to_all(buffer.data(), buffer.data(), 4, DType::F32), Error);
  std::vector<size_t> too_few(p + 1, 1);
  EXPECT_THROW(world.all_to_all_v(buffer.data(), too_few, buffer.data(), too_few, DType::F32), Error);
  std::vector<size_t> sends(p, 1), receives(p, 1);
  receives[static_cast<size_t>(world.rank())] = 2;  // disagrees with itself
  std::vector<float> out(8 * p);
  EXPECT_THROW(world.all_to_all_v(buffer.data(), sends, out.data(), receives, DType::F32), Error);
}

}  // namespace
}  // namespace strata::comm::testing
