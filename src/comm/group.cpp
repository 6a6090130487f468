#include <algorithm>
#include <numeric>

#include "comm/group_state.h"
#include "core/error.h"

namespace strata::comm {
namespace {

void check_mpi(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail("comm: {} failed: {}", what, std::string(text, static_cast<size_t>(length)));
}

std::vector<int> world_ranks_of(MPI_Comm comm, int size) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(static_cast<size_t>(size)), world_ranks(static_cast<size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  MPI_Group_translate_ranks(group, size, ranks.data(), world, world_ranks.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return world_ranks;
}

// A channel over `comm` whose ranks are the group ranks `members` (in order).
Channel make_channel(MPI_Comm comm, const std::vector<int>& members, const Channel& group_channel) {
  Channel channel;
  channel.comm = comm;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &channel.rank);
  MPI_Comm_size(comm, &channel.size);
  STRATA_CHECK(static_cast<size_t>(channel.size) == members.size(), "channel of {} ranks, {} members", channel.size,
               members.size());
  channel.group_rank = members;
  for (int member : members) channel.world_rank.push_back(group_channel.world_rank[static_cast<size_t>(member)]);
  return channel;
}

Channel duplicate(const Channel& channel, const std::string& what) {
  Channel copy = channel;
  check_mpi(MPI_Comm_dup(channel.comm, &copy.comm), what);
  MPI_Comm_set_errhandler(copy.comm, MPI_ERRORS_RETURN);
  return copy;
}

void release(Channel& channel) {
  if (channel.comm != MPI_COMM_NULL) MPI_Comm_free(&channel.comm);
}

}  // namespace

GroupState::~GroupState() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (Channel* channel : {&data, &control, &p2p, &local, &column}) release(*channel);
}

void build_channels(GroupState& group, MPI_Comm comm) {
  Channel& data = group.data;
  data.comm = comm;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &data.rank);
  MPI_Comm_size(comm, &data.size);
  data.world_rank = world_ranks_of(comm, data.size);
  data.group_rank.resize(static_cast<size_t>(data.size));
  std::iota(data.group_rank.begin(), data.group_rank.end(), 0);
  group.control = duplicate(data, "creating the control communicator of group '" + group.name + "'");
  group.p2p = duplicate(data, "creating the send/recv communicator of group '" + group.name + "'");
}

void place_nodes(GroupState& group, std::vector<int> node_of_rank) {
  const Channel& data = group.data;
  MPI_Comm comm = data.comm;
  // Number nodes by their first rank in this group.
  std::vector<int> labels;
  for (int& node : node_of_rank) {
    auto known = std::find(labels.begin(), labels.end(), node);
    if (known == labels.end()) {
      labels.push_back(node);
      known = labels.end() - 1;
    }
    node = static_cast<int>(known - labels.begin());
  }
  group.nodes = static_cast<int>(labels.size());
  group.node_of_rank = node_of_rank;
  std::vector<std::vector<int>> members(labels.size());
  for (int rank = 0; rank < data.size; ++rank) members[static_cast<size_t>(node_of_rank[static_cast<size_t>(rank)])].push_back(rank);
  size_t per_node = members[0].size();
  bool uniform = std::all_of(members.begin(), members.end(), [&](const auto& m) { return m.size() == per_node; });
  group.topology.nodes = group.nodes;
  group.topology.ranks_per_node = static_cast<int>(
      std::max_element(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); })
          ->size());
  group.topology.node_of_rank = node_of_rank;

  group.two_level = uniform && group.nodes >= 2 && per_node >= 2;
  if (!group.two_level) return;
  int node = node_of_rank[static_cast<size_t>(data.rank)];
  const std::vector<int>& mine = members[static_cast<size_t>(node)];
  int position = static_cast<int>(std::find(mine.begin(), mine.end(), data.rank) - mine.begin());
  MPI_Comm local, column;
  check_mpi(MPI_Comm_split(comm, node, data.rank, &local), "splitting group '" + group.name + "' by node");
  check_mpi(MPI_Comm_split(comm, position, node, &column), "splitting group '" + group.name + "' across nodes");
  std::vector<int> column_members;
  for (const auto& on_node : members) column_members.push_back(on_node[static_cast<size_t>(position)]);
  group.local = make_channel(local, mine, data);
  group.column = make_channel(column, column_members, data);
}

}  // namespace strata::comm
