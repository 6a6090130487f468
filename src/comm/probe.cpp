#include "comm/probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "comm/cross_memory.h"
#include "comm/engine.h"
#include "comm/machine.h"
#include "comm/probe_history.h"
#include "comm/reduce_kernels.h"
#include "comm/shared_segment.h"
#include "comm/scratch.h"
#include "core/error.h"

namespace strata::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kProbeBytes = 8u << 20;
constexpr size_t kMemoryProbeBytes = 32u << 20;
// The blocks every rank copies at once to find the node's cache as copies see it
// (effective_cache_bytes), each copied again and again up to kCacheProbeTimedBytes a timing,
// so that the small ones run long enough to time.
constexpr size_t kCacheProbeBytes[] = {size_t{256} << 10, size_t{1} << 20, size_t{4} << 20, size_t{16} << 20};
constexpr size_t kCacheProbeTimedBytes = size_t{32} << 20;
constexpr size_t kPingPongs = 100;
constexpr int kRepeats = 3;
// The block sizes the copy and cross-memory read rates are measured at: from
// blocks where a read's system call and page pinning cost more than the bytes
// (4 KiB) to one past a core's cache (8 MiB), with 1 MiB where a block and its copy outgrow a core's 2 MiB L2.
constexpr size_t kRateBlockBytes[] = {size_t{4} << 10, size_t{32} << 10, size_t{256} << 10, size_t{1} << 20,
                                      size_t{8} << 20};
// Each timing moves up to kRateTimedBytes in up to kRateBlocksTimed blocks ...
constexpr size_t kRateTimedBytes = size_t{8} << 20;
constexpr size_t kRateBlocksTimed = 32;
// ... and the best of this many runs counts: the rates decide between
// staging and reading, so they are measured a little harder than the rest.
constexpr int kRateRepeats = 7;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The largest value over the group (as f32: figures need no more precision).
double group_max(Communicator& group, double value) {
  float local = static_cast<float>(value), result = 0.0f;
  group.all_reduce(&local, &result, 1, DType::F32, ReduceOp::Max, Algorithm::RecursiveDoubling);
  return result;
}

// The message sizes the intra-node message times are measured at: the latency's 4 bytes, both sides of the
// usual eager limits (Open MPI's shared-memory transport: a 4 KiB payload with its header is past its 4 KiB),
// and up to sizes where the bandwidth of the 8 MiB exchange takes over.
constexpr size_t kMessageBytes[] = {4, 1024, 2048, 4096, 16384, 65536, 262144};

// Half the round trip of a message of `bytes` (a multiple of 4) between ranks a and b, best of kRepeats runs of
// up to kPingPongs round trips; 0 elsewhere.
double ping_pong(Communicator& group, int a, int b, size_t bytes, std::byte* buffer) {
  int me = group.rank();
  if (me != a && me != b) return 0.0;
  int peer = me == a ? b : a;
  const size_t count = bytes / sizeof(float);
  const int trips = static_cast<int>(std::clamp<size_t>((size_t{1} << 20) / bytes, 8, kPingPongs));
  double best = 1e30;
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    auto start = Clock::now();
    for (int i = 0; i < trips; ++i) {
      if (me == a) {
        group.send(buffer, count, DType::F32, peer);
        group.recv(buffer, count, DType::F32, peer);
      } else {
        group.recv(buffer, count, DType::F32, peer);
        group.send(buffer, count, DType::F32, peer);
      }
    }
    best = std::min(best, seconds_since(start) / (2.0 * trips));
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

// Seconds until every rank of the group has copied `bytes` (memcpy between two
// buffers of its own), all starting together, best of three: with all ranks of
// a node copying at once, the node's memory bandwidth is what they share. Each
// rank's clock runs until the last one is done (so a rank that starts late,
// because ranks outnumber the cores, still counts), and the slowest clock is
// the figure.
// Seconds of the slowest rank's `times` copies of one block of `bytes`, every rank at once, best of
// kRepeats.
double concurrent_copy_time(Communicator& group, size_t bytes, size_t times = 1) {
  std::vector<std::byte> source(bytes, std::byte{1}), target(bytes, std::byte{0});
  double best = 1e30;
  for (int repeat = 0; repeat <= kRepeats; ++repeat) {
    group.barrier();
    auto start = Clock::now();
    for (size_t copy = 0; copy < times; ++copy) std::memcpy(target.data(), source.data(), bytes);
    group.barrier();
    double slowest = group_max(group, seconds_since(start));
    if (repeat > 0) best = std::min(best, slowest);  // the first run warms the path
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

// The exchange area of this node's ranks for the rate probe: the node's first
// rank creates a shared segment (named after its world rank and pid), the
// others map it; null on every rank of a node where any rank fails.
std::unique_ptr<SharedSegment> probe_segment(Communicator& group, const std::vector<int>& node, int position) {
  constexpr size_t kName = 64;
  char mine[kName] = {};
  if (position == 0) std::snprintf(mine, kName, "/strata-probe-%d-%d", group.rank(), static_cast<int>(getpid()));
  std::vector<char> names(kName * static_cast<size_t>(group.size()));
  group.all_gather(mine, names.data(), kName / sizeof(int32_t), DType::I32);  // as 32-bit words
  const std::string name(names.data() + kName * static_cast<size_t>(node[0]));
  std::unique_ptr<SharedSegment> segment;
  const int ranks = static_cast<int>(node.size());
  if (position == 0) {
    shm_unlink(name.c_str());  // a leftover of a crashed process with the same pid
    segment = SharedSegment::map(name, true, ranks, kSharedMemorySlotBytes, kRateTimedBytes);
  }
  group.barrier();
  if (position != 0) segment = SharedSegment::map(name, false, ranks, kSharedMemorySlotBytes, kRateTimedBytes);
  float failed = segment && segment->staging_room(position, kRateTimedBytes) >= kRateTimedBytes ? 0.0f : 1.0f;
  float anyone = 0.0f;
  group.all_reduce(&failed, &anyone, 1, DType::F32, ReduceOp::Max);
  if (position == 0) shm_unlink(name.c_str());
  if (anyone > 0.0f) segment.reset();
  return segment;
}

// Rates of one rank (bytes per second, the worst over the group) for blocks of
// `block` bytes, every rank paired with `partner` on its node (its position
// there `partner_position`; -1: sits out), as the one-host all-to-all moves
// them, from an input written once per run (as a caller's buffer exchanged
// again, comm-bench's among them): staged, the sender copies it into its
// exchange area and, once all have, the partner copies it out (the copy rate
// is the two copies' mean); read, the partner reads it from the input by
// cross-memory attach. Blocks one at a time, each timed alone, so each staged
// block crosses between the cores afresh; best of kRateRepeats. (An input
// rewritten before every block, as a freshly computed one, makes small reads
// dearer: its lines come out of the sender's cache. On the Xeon VM 32 KiB
// blocks then read at 5.7 GB/s, and the model staged the 2-rank 64-256 KiB
// exchanges that comm-bench measured faster read, with reused inputs and with
// fresh ones alike: `comm-bench --input fresh`.) A rate stays 0 where it
// cannot be measured (no exchange area, reading refused).
struct BlockRates {
  double copy = 0.0;
  double cross_read = 0.0;
};

BlockRates block_rates(Communicator& group, SharedSegment* segment, int position, int partner, int partner_position,
                       size_t block) {
  std::vector<std::byte> source(block, std::byte{1}), target(block, std::byte{0});
  // Under Yama's ptrace scope 1, only allowed processes may read this one.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  uint64_t mine[2] = {static_cast<uint64_t>(getpid()), reinterpret_cast<uint64_t>(source.data())};
  std::vector<uint64_t> all(2 * static_cast<size_t>(group.size()));
  group.all_gather(mine, all.data(), 2 * sizeof(uint64_t) / sizeof(int32_t), DType::I32);  // as 32-bit words
  const bool pairs = partner >= 0;
  const size_t times = std::clamp<size_t>(kRateTimedBytes / block, 1, kRateBlocksTimed);
  double copy_best = 1e30, read_best = 1e30;
  int failed = 0;
  for (int repeat = 0; repeat <= kRateRepeats; ++repeat) {
    double copy_s = 0.0, read_s = 0.0;
    std::memset(source.data(), repeat + 1, block);
    for (size_t i = 0; i < times; ++i) {
      group.barrier();
      if (segment) {
        auto start = Clock::now();
        std::memcpy(segment->staged_data(position), source.data(), block);
        copy_s += seconds_since(start);
        group.barrier();
        if (pairs) {
          start = Clock::now();
          std::memcpy(target.data(), segment->staged_data(partner_position), block);
          copy_s += seconds_since(start);
        }
      }
      group.barrier();
      if (pairs && failed == 0) {
        auto start = Clock::now();
        failed = read_remote(static_cast<pid_t>(all[2 * static_cast<size_t>(partner)]),
                             all[2 * static_cast<size_t>(partner) + 1], target.data(), block);
        read_s += seconds_since(start);
      }
      group.barrier();  // the input stays until its reader is done
    }
    if (repeat > 0) {  // the first run warms the path
      copy_best = std::min(copy_best, copy_s);
      read_best = std::min(read_best, read_s);
    }
  }
  const double moved = static_cast<double>(times * block);
  BlockRates rates;
  const double slowest_copy = group_max(group, segment && pairs ? copy_best / 2.0 : 0.0);
  if (segment && slowest_copy > 0.0) rates.copy = moved / slowest_copy;
  const double slowest_read = group_max(group, pairs ? (failed != 0 ? 1e30 : read_best) : 0.0);
  if (slowest_read > 0.0 && slowest_read < 1e29) rates.cross_read = moved / slowest_read;
  return rates;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// Rank 0's verdict: how to get the figures, with the loaded description (as
// cluster-file text) or the reason it failed following in a second message.
struct Verdict {
  int32_t mode = 0;  // 0: failed (the text says why), 1: figures loaded, 2: probe now
  char kind[16] = {};
  char path[1024] = {};
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
  // Each rank copies 32 MiB (64 MiB touched), so the node's copies outgrow its cache.
  const double copy_seconds = concurrent_copy_time(group, kMemoryProbeBytes);
  topology.memory_Bps = static_cast<double>(kMemoryProbeBytes) * static_cast<double>(mine.size()) / copy_seconds;
  std::vector<CacheProbePoint> cache_points;
  const double copying_cores = Engine::instance().cores_for(static_cast<int>(mine.size()));
  for (size_t bytes : kCacheProbeBytes) {
    const size_t times = std::max<size_t>(1, kCacheProbeTimedBytes / bytes);
    const double node_bytes = static_cast<double>(bytes) * static_cast<double>(mine.size());
    const double seconds = concurrent_copy_time(group, bytes, times);
    cache_points.push_back({.touched = 2.0 * node_bytes, .Bps = node_bytes * static_cast<double>(times) / seconds});
    // One rank's rate: the node's over the cores its ranks copy on.
    topology.local_copy.points.emplace_back(static_cast<double>(bytes), cache_points.back().Bps / copying_cores);
  }
  topology.cache_bytes = effective_cache_bytes(cache_points, topology.memory_Bps,
                                               static_cast<double>(last_level_cache_bytes(discover_machine())));

  auto node_with_pair = std::find_if(members.begin(), members.end(), [](const auto& m) { return m.size() >= 2; });
  bool measurable_intra = node_with_pair != members.end();
  if (measurable_intra) {
    for (size_t bytes : kMessageBytes) {
      const double seconds =
          group_max(group, ping_pong(group, (*node_with_pair)[0], (*node_with_pair)[1], bytes, send.bytes()));
      topology.intra_message.emplace_back(static_cast<double>(bytes), seconds);
    }
    topology.intra.latency_s = topology.intra_message.front().second;
    int partner = -1;
    int buddy = position ^ 1;
    if (buddy < static_cast<int>(mine.size())) partner = mine[static_cast<size_t>(buddy)];
    topology.intra.bandwidth_Bps = kProbeBytes / group_max(group, exchange_time(group, partner, send.bytes(), recv.bytes()));
    std::unique_ptr<SharedSegment> segment = probe_segment(group, mine, position);
    for (size_t block : kRateBlockBytes) {
      const BlockRates rates = block_rates(group, segment.get(), position, partner, buddy, block);
      if (rates.copy > 0.0) topology.copy.points.emplace_back(static_cast<double>(block), rates.copy);
      if (rates.cross_read > 0.0) topology.cross_read.points.emplace_back(static_cast<double>(block), rates.cross_read);
    }
    // A curve measured at some sizes only would mislead: unknown instead.
    if (topology.copy.points.size() != std::size(kRateBlockBytes)) topology.copy.points.clear();
    if (topology.cross_read.points.size() != std::size(kRateBlockBytes)) topology.cross_read.points.clear();
  }
  if (group.nodes() >= 2) {
    topology.inter.latency_s = group_max(group, ping_pong(group, members[0][0], members[1][0], 4, send.bytes()));
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

namespace {

// The cached probe for `key`, or nothing when it is another layout's or this build cannot read it (written by
// another version, or damaged): the cache is the layer's own, so such a file is stale, probed again and
// replaced, never an error. A topology file the user names stays strict.
std::optional<ClusterDescription> readable_cache(const std::filesystem::path& cache, const std::string& key) {
  try {
    ClusterDescription cached = load_cluster_description(cache);
    if (cached.probe_key == key) return cached;
  } catch (const Error& error) {
    std::fprintf(stderr, "strata comm: cannot read the link probe cache (%s); probing again\n", error.what());
  }
  return std::nullopt;
}

// Rank 0, after `probe`: the layout's `probes` so far (none after a reprobe) with this one last, and the figures
// they settle on with the calibration of the `cached` figures kept, both written to the cache. A cache that cannot
// be written is reported, not fatal: this launch has its figures.
ClusterDescription settle_and_cache(const std::filesystem::path& cache, std::vector<ClusterDescription> probes,
                                    const ClusterDescription& probe, const std::optional<ClusterDescription>& cached) {
  probes.push_back(probe);
  if (probes.size() > kSettlingProbes) probes.erase(probes.begin());
  ClusterDescription settled = settled_figures(probes);
  if (cached) settled.calibration = cached->calibration;
  try {
    std::filesystem::create_directories(cache.parent_path());
    keep_probes(cache, probes);
    save_cluster_description(cache, settled);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "strata comm: could not cache the link probe in %s: %s\n", cache.string().c_str(),
                 error.what());
  }
  return settled;
}

// Rank 0's `text` on every rank.
std::string broadcast_text(Communicator& world, std::string text) {
  int32_t bytes = static_cast<int32_t>(text.size());
  world.broadcast(&bytes, 1, DType::I32, 0);
  text.resize(static_cast<size_t>(bytes));
  std::vector<int32_t> words((text.size() + 3) / 4);
  std::memcpy(words.data(), text.data(), text.size());
  world.broadcast(words.data(), words.size(), DType::I32, 0);
  std::memcpy(text.data(), words.data(), text.size());
  return text;
}

}  // namespace

ResolvedLinks resolve_links(Communicator& world, const std::string& key) {
  const CommConfig& config = world.config();
  Verdict verdict;
  std::string text;
  std::filesystem::path cache = probe_cache_path(config, key);
  // Rank 0, without a named file or a reprobe: the layout's probes so far and its cache, read once for both the
  // verdict and a settling probe (which keeps the cache's calibration).
  std::vector<ClusterDescription> kept;
  std::optional<ClusterDescription> cached;
  if (world.rank() == 0) {
    try {
      std::optional<ClusterDescription> loaded;
      std::string kind, path;
      if (!config.topology_file.empty()) {
        loaded = load_cluster_description(config.topology_file);
        kind = "file";
        path = config.topology_file;
      } else if (!config.reprobe) {
        kept = kept_probes(cache, key);
        if (std::filesystem::exists(cache)) cached = readable_cache(cache, key);
        if (cached && kept.size() >= kSettlingProbes) {  // settled; until then every launch probes
          loaded = cached;
          kind = "cache";
          path = cache.string();
        }
      }
      verdict.mode = loaded ? 1 : 2;
      if (loaded) text = format_cluster_description(*loaded);
      copy_text(verdict.kind, sizeof(verdict.kind), kind);
      copy_text(verdict.path, sizeof(verdict.path), path);
    } catch (const Error& error) {
      verdict.mode = 0;
      text = error.what();
    }
  }
  world.broadcast(&verdict, sizeof(Verdict) / sizeof(int32_t), DType::I32, 0);
  text = broadcast_text(world, std::move(text));
  if (verdict.mode == 0) fail("{}", text);

  ResolvedLinks resolved;
  if (verdict.mode == 1) {
    resolved.description = parse_cluster_description(text, verdict.path);
    resolved.source = {verdict.kind, verdict.path};
    return resolved;
  }
  ClusterDescription probe = probe_links(world);
  probe.probe_key = key;
  std::string settled;
  if (world.rank() == 0) settled = format_cluster_description(settle_and_cache(cache, std::move(kept), probe, cached));
  resolved.description = parse_cluster_description(broadcast_text(world, std::move(settled)), cache.string());
  resolved.source = {"probe", cache.string()};
  return resolved;
}

}  // namespace strata::comm
