// Creating groups: the world (join, host names, nodes, links, shared
// memory) and splits.
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>

#include "comm/algorithms.h"
#include "comm/group_state.h"
#include "comm/probe.h"
#include "core/error.h"

namespace strata::comm {
namespace {

Task await_request(Context ctx, MPI_Request request) {
  RequestSet requests(ctx.op, ctx.channel, ctx.tag, 1);
  requests.adopt(0, request);
  co_await requests.all();
}

// Joins MPI_COMM_WORLD through a non-blocking dup polled with the timeout, so
// a rank that never arrives fails the others instead of hanging them.
MPI_Comm join_world(const CommConfig& config) {
  Channel world;
  world.comm = MPI_COMM_WORLD;
  MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world.size);
  for (int rank = 0; rank < world.size; ++rank) {
    world.group_rank.push_back(rank);
    world.world_rank.push_back(rank);
  }
  static const std::string kWorld = "world";
  OpLabel label;
  label.kind = "joining (MPI_Comm_idup)";
  label.group = &kWorld;
  label.group_rank = world.rank;
  label.group_size = world.size;
  auto op = std::make_shared<Operation>(label, config.timeout_s);
  MPI_Comm joined = MPI_COMM_NULL;
  MPI_Request request;
  if (MPI_Comm_idup(MPI_COMM_WORLD, &joined, &request) != MPI_SUCCESS) fail("comm: MPI_Comm_idup failed");
  op->set_body(await_request(Context{*op, world, 0, config.chunk_bytes, config.pipeline_depth}, request));
  Engine::instance().launch(op);
  Engine::instance().wait(*op);
  return joined;
}

// Every rank's host name, exchanged as fixed 256-byte records.
std::vector<std::string> gather_hostnames(Communicator& world) {
  constexpr size_t kRecord = 256;
  char mine[kRecord] = {};
  gethostname(mine, kRecord - 1);
  std::vector<char> all(kRecord * static_cast<size_t>(world.size()));
  world.all_gather(mine, all.data(), kRecord / sizeof(int32_t), DType::I32);
  std::vector<std::string> names;
  for (int rank = 0; rank < world.size(); ++rank) names.emplace_back(all.data() + kRecord * static_cast<size_t>(rank));
  return names;
}

// The node of every rank: ranks sharing memory (MPI_COMM_TYPE_SHARED), named
// by their lowest world rank, or consecutive blocks when simulating nodes.
std::vector<int> gather_nodes(Communicator& world, MPI_Comm comm, int simulated_ranks_per_node) {
  int32_t mine = 0;
  if (simulated_ranks_per_node > 0) {
    mine = world.rank() / simulated_ranks_per_node;
  } else {
    MPI_Comm shared;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &shared) != MPI_SUCCESS) {
      fail("comm: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
    }
    MPI_Group shared_group, world_group;
    MPI_Comm_group(shared, &shared_group);
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    int first = 0;
    MPI_Group_translate_ranks(shared_group, 1, &first, world_group, &mine);
    MPI_Group_free(&shared_group);
    MPI_Group_free(&world_group);
    MPI_Comm_free(&shared);
  }
  std::vector<int32_t> all(static_cast<size_t>(world.size()));
  world.all_gather(&mine, all.data(), 1, DType::I32);
  return std::vector<int>(all.begin(), all.end());
}

// Names the launch layout, so a cached probe is reused only for the same one. The version names the
// cached file's contents (v2: the direct_split calibration; v3: the memory bandwidth and cache size; v4: the
// copy and cross-memory read rates; v5: the intra-node message times; v6: the cache as copies see it; v7: the local copy rate):
// builds that write other contents use other files, so neither finds the other's keys.
std::string layout_key(const std::vector<std::string>& hostnames, const std::vector<int>& nodes, int simulated) {
  std::string key = fmt::format("strata comm links v7: {} ranks", hostnames.size());
  std::vector<int> seen;
  for (size_t rank = 0; rank < nodes.size(); ++rank) {
    if (std::find(seen.begin(), seen.end(), nodes[rank]) != seen.end()) continue;
    seen.push_back(nodes[rank]);
    long members = std::count(nodes.begin(), nodes.end(), nodes[rank]);
    key += fmt::format("; {} x{}", hostnames[rank], members);
  }
  if (simulated > 0) key += fmt::format("; simulated nodes of {}", simulated);
  return key;
}

}  // namespace

namespace {

// Whether every rank can read every other's memory (cross-memory attach; Yama
// and container policies may forbid it): each reads a known word of each peer.
bool check_cross_memory(Communicator& group) {
  static const uint64_t kProbeWord = 0x5354524154410001ull;
  // Under Yama's ptrace scope 1, only allowed processes may read this one.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  uint64_t mine[2] = {static_cast<uint64_t>(getpid()), reinterpret_cast<uint64_t>(&kProbeWord)};
  std::vector<uint64_t> all(2 * static_cast<size_t>(group.size()));
  group.all_gather(mine, all.data(), 2 * sizeof(uint64_t) / sizeof(int32_t), DType::I32);  // as 32-bit words
  float unreadable = 0.0f, anyone = 0.0f;
  for (int rank = 0; rank < group.size(); ++rank) {
    if (rank == group.rank()) continue;
    uint64_t word = 0;
    iovec local{&word, sizeof(word)};
    iovec remote{reinterpret_cast<void*>(all[2 * static_cast<size_t>(rank) + 1]), sizeof(word)};
    if (process_vm_readv(static_cast<pid_t>(all[2 * static_cast<size_t>(rank)]), &local, 1, &remote, 1, 0) !=
            static_cast<ssize_t>(sizeof(word)) ||
        word != kProbeWord) {
      unreadable = 1.0f;
    }
  }
  group.all_reduce(&unreadable, &anyone, 1, DType::F32, ReduceOp::Max);
  return anyone == 0.0f;
}

}  // namespace

void attach_shared_memory(Communicator& group, GroupState& state) {
  state.shm.reset();
  state.topology.shared_memory = false;
  state.topology.cross_memory = false;
  if (state.nodes != 1 || state.size() < 2) return;
  static int segments = 0;
  char name[64] = {};
  std::unique_ptr<SharedSegment> segment;
  if (group.rank() == 0) {
    std::snprintf(name, sizeof(name), "/strata-comm-%d-%d", static_cast<int>(getpid()), segments++);
    shm_unlink(name);  // a leftover of a crashed process with the same pid
    segment = SharedSegment::map(name, true, state.size(), kSharedMemorySlotBytes, state.config.exchange_staging_bytes);
  }
  group.broadcast(name, sizeof(name) / sizeof(int32_t), DType::I32, 0);
  if (group.rank() != 0) {
    segment = SharedSegment::map(name, false, state.size(), kSharedMemorySlotBytes, state.config.exchange_staging_bytes);
  }
  float failed = segment ? 0.0f : 1.0f, anyone_failed = 0.0f;
  group.all_reduce(&failed, &anyone_failed, 1, DType::F32, ReduceOp::Max);
  // Every rank that could has mapped it: the name can go.
  if (group.rank() == 0) shm_unlink(name);
  if (anyone_failed > 0.0f) return;
  segment->touch(group.rank());
  state.shm = std::move(segment);
  state.topology.shared_memory = true;
  state.topology.cross_memory = check_cross_memory(group);
  state.topology.cores_per_node = Engine::instance().cores_for(state.size());
  state.model.all_to_all_staging_limit = state.config.all_to_all_staging_bytes;
  state.choices.clear();  // choices and predictions made during start-up did not know about the segment
  state.pinned_predictions.clear();
}

Communicator Communicator::world(const CommConfig& config) {
  config.validate("comm config");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) fail("comm: MPI is not initialised (create a comm::MpiSession first)");
  auto state = std::make_shared<GroupState>();
  state->name = "world";
  state->config = config;
  MPI_Comm comm = join_world(config);
  build_channels(*state, comm);
  // Provisional figures until the links are known: start-up calls only need to work.
  state->topology.intra = state->topology.inter = {1e-6, 1e9};
  state->topology.reduce_Bps = 1e9;
  state->model.chunk_bytes = config.chunk_bytes;
  state->model.staging_bytes = config.exchange_staging_bytes;
  place_nodes(*state, std::vector<int>(static_cast<size_t>(state->size()), 0));
  Communicator world(state);

  std::vector<std::string> hostnames = gather_hostnames(world);
  set_world_hostnames(hostnames);
  std::vector<int> nodes = gather_nodes(world, comm, config.simulated_ranks_per_node);
  place_nodes(*state, nodes);
  // Ranks sharing this host (by host name: simulated nodes still share the cores).
  long here = std::count(hostnames.begin(), hostnames.end(), hostnames[static_cast<size_t>(world.rank())]);
  Engine::instance().set_host(static_cast<int>(here), static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));

  ResolvedLinks links = resolve_links(world, layout_key(hostnames, nodes, config.simulated_ranks_per_node));
  const TopologyDesc& figures = links.description.topology;
  state->topology.intra = figures.intra;
  state->topology.inter = state->nodes > 1 ? figures.inter : figures.intra;
  state->topology.reduce_Bps = figures.reduce_Bps;
  state->topology.memory_Bps = figures.memory_Bps;
  state->topology.cache_bytes = figures.cache_bytes;
  state->topology.local_copy = figures.local_copy;
  state->topology.copy = figures.copy;
  state->topology.cross_read = figures.cross_read;
  state->topology.intra_message = figures.intra_message;
  state->topology.validate("the link figures of group 'world' (" + links.source.kind + " " + links.source.path + ")");
  state->model.calibration = links.description.calibration;
  state->link_source = links.source;
  attach_shared_memory(world, *state);
  return world;
}

Communicator Communicator::split(int color, int key, const std::string& name) const {
  const GroupState& parent = state();
  if (color < 0) fail("split of group '{}' into '{}': color {} must be >= 0", parent.name, name, color);
  // MPI_Comm_split blocks, so first make sure every rank is here (with the timeout).
  Communicator self = *this;
  self.barrier();
  MPI_Comm comm;
  if (MPI_Comm_split(parent.data.comm, color, key, &comm) != MPI_SUCCESS) {
    fail("comm: MPI_Comm_split of group '{}' into '{}' failed", parent.name, name);
  }
  auto state = std::make_shared<GroupState>();
  state->name = name;
  state->config = parent.config;
  build_channels(*state, comm);
  state->topology = parent.topology;
  state->model = parent.model;
  state->link_source = parent.link_source;
  // A member's node, as its parent knew it.
  std::vector<int> nodes;
  for (int world_rank : state->data.world_rank) {
    auto found = std::find(parent.data.world_rank.begin(), parent.data.world_rank.end(), world_rank);
    nodes.push_back(parent.node_of_rank[static_cast<size_t>(found - parent.data.world_rank.begin())]);
  }
  place_nodes(*state, nodes);
  Communicator group(state);
  attach_shared_memory(group, *state);
  return group;
}

}  // namespace strata::comm
