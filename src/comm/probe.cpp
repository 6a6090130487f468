#include "comm/probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "comm/reduce_kernels.h"
#include "comm/scratch.h"
#include "core/error.h"

namespace strata::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kProbeBytes = 8u << 20;
constexpr int kPingPongs = 100;
constexpr int kRepeats = 3;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The largest value over the group (as f32: figures need no more precision).
double group_max(Communicator& group, double value) {
  float local = static_cast<float>(value), result = 0.0f;
  group.all_reduce(&local, &result, 1, DType::F32, ReduceOp::Max, Algorithm::RecursiveDoubling);
  return result;
}

// Half the round trip of a 4-byte message between ranks a and b; 0 elsewhere.
double ping_pong(Communicator& group, int a, int b) {
  int me = group.rank();
  if (me != a && me != b) return 0.0;
  int peer = me == a ? b : a;
  float token = 0.0f;
  double best = 1e30;
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    auto start = Clock::now();
    for (int i = 0; i < kPingPongs; ++i) {
      if (me == a) {
        group.send(&token, 1, DType::F32, peer);
        group.recv(&token, 1, DType::F32, peer);
      } else {
        group.recv(&token, 1, DType::F32, peer);
        group.send(&token, 1, DType::F32, peer);
      }
    }
    best = std::min(best, seconds_since(start) / (2.0 * kPingPongs));
  }
  return best;
}

// Seconds of one exchange of kProbeBytes with `partner` (-1: sit out), best of three.
double exchange_time(Communicator& group, int partner, std::byte* send, std::byte* recv) {
  if (partner < 0) return 0.0;
  size_t count = kProbeBytes / sizeof(float);
  double best = 1e30;
  for (int repeat = 0; repeat <= kRepeats; ++repeat) {
    auto start = Clock::now();
    Handle incoming = group.recv_async(recv, count, DType::F32, partner);
    Handle outgoing = group.send_async(send, count, DType::F32, partner);
    incoming.wait();
    outgoing.wait();
    if (repeat > 0) best = std::min(best, seconds_since(start));  // the first run warms the path
  }
  return best;
}

double reduce_time(float* a, float* b) {
  size_t count = kProbeBytes / sizeof(float);
  double best = 1e30;
  for (int repeat = 0; repeat <= kRepeats; ++repeat) {
    auto start = Clock::now();
    combine(a, a, b, count, ReduceOp::Sum);
    if (repeat > 0) best = std::min(best, seconds_since(start));
  }
  return best;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// Rank 0's verdict, sent to everyone as one flat message.
struct Verdict {
  int32_t mode = 0;  // 0: failed (text says why), 1: figures loaded, 2: probe now
  int32_t unused = 0;
  double intra_latency = 0, intra_bandwidth = 0, inter_latency = 0, inter_bandwidth = 0, reduce = 0;
  double latency_scale[kAlgorithmSlots] = {};
  double bandwidth_scale[kAlgorithmSlots] = {};
  char kind[16] = {};
  char text[1024] = {};
};
static_assert(sizeof(Verdict) % sizeof(int32_t) == 0);

void copy_text(char* target, size_t capacity, const std::string& text) {
  size_t length = std::min(capacity - 1, text.size());
  std::memcpy(target, text.data(), length);
  target[length] = '\0';
}

}  // namespace

ClusterDescription probe_links(Communicator& group) {
  const int p = group.size();
  const int me = group.rank();
  ClusterDescription description;
  TopologyDesc& topology = description.topology;
  topology.nodes = group.nodes();
  topology.ranks_per_node = group.topology().ranks_per_node;

  // Each rank's position within its node, and the members of nodes 0 and 1.
  std::vector<std::vector<int>> members(static_cast<size_t>(group.nodes()));
  for (int rank = 0; rank < p; ++rank) members[static_cast<size_t>(group.node_of(rank))].push_back(rank);
  const std::vector<int>& mine = members[static_cast<size_t>(group.node_of(me))];
  int position = static_cast<int>(std::find(mine.begin(), mine.end(), me) - mine.begin());

  ScratchPool::Lease send = ScratchPool::instance().acquire(kProbeBytes);
  ScratchPool::Lease recv = ScratchPool::instance().acquire(kProbeBytes);
  std::memset(send.bytes(), 0, kProbeBytes);
  std::memset(recv.bytes(), 0, kProbeBytes);

  topology.reduce_Bps = kProbeBytes / group_max(group, reduce_time(send.floats(), recv.floats()));

  auto node_with_pair = std::find_if(members.begin(), members.end(), [](const auto& m) { return m.size() >= 2; });
  bool measurable_intra = node_with_pair != members.end();
  if (measurable_intra) {
    topology.intra.latency_s = group_max(group, ping_pong(group, (*node_with_pair)[0], (*node_with_pair)[1]));
    int partner = -1;
    int buddy = position ^ 1;
    if (buddy < static_cast<int>(mine.size())) partner = mine[static_cast<size_t>(buddy)];
    topology.intra.bandwidth_Bps = kProbeBytes / group_max(group, exchange_time(group, partner, send.bytes(), recv.bytes()));
  }
  if (group.nodes() >= 2) {
    topology.inter.latency_s = group_max(group, ping_pong(group, members[0][0], members[1][0]));
    int pairs = static_cast<int>(std::min(members[0].size(), members[1].size()));
    int partner = -1;
    int node = group.node_of(me);
    if (position < pairs && node <= 1) partner = members[static_cast<size_t>(1 - node)][static_cast<size_t>(position)];
    double seconds = group_max(group, exchange_time(group, partner, send.bytes(), recv.bytes()));
    topology.inter.bandwidth_Bps = pairs * static_cast<double>(kProbeBytes) / seconds;
  }
  if (!measurable_intra) topology.intra = group.nodes() >= 2 ? topology.inter : LinkLevel{1e-6, topology.reduce_Bps};
  if (group.nodes() < 2) topology.inter = topology.intra;
  return description;
}

std::filesystem::path probe_cache_path(const CommConfig& config, const std::string& key) {
  std::filesystem::path directory;
  if (!config.cache_dir.empty()) {
    directory = config.cache_dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    directory = std::filesystem::path(xdg) / "strata";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    directory = std::filesystem::path(home) / ".cache" / "strata";
  } else {
    directory = std::filesystem::temp_directory_path() / "strata-cache";
  }
  return directory / fmt::format("comm-links-{:016x}.toml", fnv1a(key));
}

ResolvedLinks resolve_links(Communicator& world, const std::string& key) {
  const CommConfig& config = world.config();
  Verdict verdict;
  std::filesystem::path cache = probe_cache_path(config, key);
  if (world.rank() == 0) {
    try {
      std::optional<ClusterDescription> loaded;
      if (!config.topology_file.empty()) {
        loaded = load_cluster_description(config.topology_file);
        copy_text(verdict.kind, sizeof(verdict.kind), "file");
        copy_text(verdict.text, sizeof(verdict.text), config.topology_file);
      } else if (!config.reprobe && std::filesystem::exists(cache)) {
        ClusterDescription cached = load_cluster_description(cache);
        if (cached.probe_key == key) {
          loaded = cached;
          copy_text(verdict.kind, sizeof(verdict.kind), "cache");
          copy_text(verdict.text, sizeof(verdict.text), cache.string());
        }
      }
      verdict.mode = loaded ? 1 : 2;
      if (loaded) {
        const TopologyDesc& t = loaded->topology;
        verdict.intra_latency = t.intra.latency_s;
        verdict.intra_bandwidth = t.intra.bandwidth_Bps;
        verdict.inter_latency = t.inter.latency_s;
        verdict.inter_bandwidth = t.inter.bandwidth_Bps;
        verdict.reduce = t.reduce_Bps;
        for (size_t i = 0; i < kAlgorithmSlots; ++i) {
          verdict.latency_scale[i] = loaded->calibration[i].latency_scale;
          verdict.bandwidth_scale[i] = loaded->calibration[i].bandwidth_scale;
        }
      }
    } catch (const Error& error) {
      verdict.mode = 0;
      copy_text(verdict.text, sizeof(verdict.text), error.what());
    }
  }
  world.broadcast(&verdict, sizeof(Verdict) / sizeof(int32_t), DType::I32, 0);
  if (verdict.mode == 0) fail("{}", verdict.text);

  ResolvedLinks resolved;
  ClusterDescription& description = resolved.description;
  if (verdict.mode == 1) {
    TopologyDesc& t = description.topology;
    t.intra = {verdict.intra_latency, verdict.intra_bandwidth};
    t.inter = {verdict.inter_latency, verdict.inter_bandwidth};
    t.reduce_Bps = verdict.reduce;
    for (size_t i = 0; i < kAlgorithmSlots; ++i) {
      description.calibration[i] = {verdict.latency_scale[i], verdict.bandwidth_scale[i]};
    }
    resolved.source = {verdict.kind, verdict.text};
    return resolved;
  }
  description = probe_links(world);
  description.probe_key = key;
  resolved.source = {"probe", cache.string()};
  if (world.rank() == 0) {
    try {
      std::filesystem::create_directories(cache.parent_path());
      save_cluster_description(cache, description);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "strata comm: could not cache the link probe in %s: %s\n", cache.string().c_str(),
                   error.what());
    }
  }
  return resolved;
}

}  // namespace strata::comm
