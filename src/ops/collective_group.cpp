#include "ops/collective_group.h"

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace strata {

namespace {

class SingleRank final : public CollectiveGroup {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void all_reduce_sum(void*, size_t, DType) override {}
  void all_gather_bytes(const void* in, void* out, size_t bytes) override { std::memmove(out, in, bytes); }
  void all_to_all_bytes(const void* in, void* out, size_t bytes) override { std::memmove(out, in, bytes); }
  void all_to_all_v_bytes(const void* in, std::span<const size_t> send_bytes, void* out,
                          std::span<const size_t> recv_bytes) override {
    STRATA_CHECK(send_bytes.size() == 1 && recv_bytes.size() == 1 && send_bytes[0] == recv_bytes[0],
                 "an all_to_all_v of one rank sending {} bytes and receiving {}", send_bytes[0], recv_bytes[0]);
    std::memmove(out, in, send_bytes[0]);
  }
  void reduce_scatter_sum(const void* in, void* out, size_t count, DType dtype) override {
    std::memmove(out, in, count * dtype_size(dtype));
  }
  // A group of one rank has no other stage: a graph with a stage boundary was built for a pipeline.
  void send_bytes(const void*, size_t, int peer, StageFlow) override { no_peer(peer); }
  void receive_bytes(void*, size_t, int peer, StageFlow) override { no_peer(peer); }
  double finish_sends() override { return 0.0; }

 private:
  [[noreturn]] static void no_peer(int peer) {
    fail("a pipeline stage transfer with stage {} in a group of one rank (no pipeline group is registered)", peer);
  }
};

std::mutex registry_mutex;
std::map<std::string, std::shared_ptr<CollectiveGroup>>& registry() {
  static std::map<std::string, std::shared_ptr<CollectiveGroup>> groups;
  return groups;
}

// A shape cut at `dim`: `outer` rows of `block_bytes` (dim and everything after it).
struct DimSplit {
  size_t outer = 1;
  size_t block_bytes = 0;
};

DimSplit split_at(const Shape& shape, int64_t dim, DType dtype) {
  DimSplit split;
  split.block_bytes = dtype_size(dtype);
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (static_cast<int64_t>(axis) < dim) {
      split.outer *= static_cast<size_t>(shape[axis]);
    } else {
      split.block_bytes *= static_cast<size_t>(shape[axis]);
    }
  }
  return split;
}

// Blocks between tensor order [outer, ranks, block] (rank r's block of each row at r) and rank
// order [ranks, outer, block] (one contiguous part per rank, as collectives lay them out).
void regroup(const char* from, char* to, const DimSplit& split, size_t ranks, bool into_rank_order) {
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t o = 0; o < split.outer; ++o) {
      const size_t tensor_at = (o * ranks + r) * split.block_bytes, rank_at = (r * split.outer + o) * split.block_bytes;
      std::memcpy(to + (into_rank_order ? rank_at : tensor_at), from + (into_rank_order ? tensor_at : rank_at),
                  split.block_bytes);
    }
  }
}

void copy_input(const Tensors& inputs, const Tensors& outputs) {
  if (outputs[0].raw() != inputs[0].raw()) {
    std::memcpy(outputs[0].raw(), inputs[0].raw(), inputs[0].nbytes());
  }
}

}  // namespace

CollectiveGroup& collective_group_of(const std::string& op, const Attrs& attrs) {
  const std::string& name = attrs.get_string("group");
  CollectiveGroup& group = collective_group(name);
  if (group.size() != attrs.get_int("ranks")) {
    fail("op '{}': the graph was built for {} ranks in group '{}', but that group has {}", op, attrs.get_int("ranks"),
         name, group.size());
  }
  return group;
}

std::string_view stage_flow_name(StageFlow flow) {
  return flow == StageFlow::Activations ? "activations" : "gradients";
}

StageFlow parse_stage_flow(const std::string& op, const Attrs& attrs) {
  const std::string& flow = attrs.get_string("flow");
  if (flow == "activations") return StageFlow::Activations;
  if (flow == "gradients") return StageFlow::Gradients;
  fail("op '{}': attr 'flow' must be \"activations\" or \"gradients\", got \"{}\"", op, flow);
}

void register_collective_group(const std::string& name, std::shared_ptr<CollectiveGroup> group) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (group) {
    registry()[name] = std::move(group);
  } else {
    registry().erase(name);
  }
}

CollectiveGroup& collective_group(const std::string& name) {
  static SingleRank single_rank;
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto found = registry().find(name);
  return found == registry().end() ? single_rank : *found->second;
}

void all_reduce_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  CollectiveGroup& group = collective_group_of("all_reduce", attrs);
  copy_input(inputs, outputs);
  group.all_reduce_sum(outputs[0].raw(), static_cast<size_t>(outputs[0].numel()), outputs[0].dtype());
}

void copy_to_group_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  collective_group_of("copy_to_group", attrs);
  copy_input(inputs, outputs);
}

void all_gather_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  CollectiveGroup& group = collective_group_of("all_gather", attrs);
  const Tensor& x = inputs[0];
  const DimSplit split = split_at(x.shape(), attrs.get_int("dim"), x.dtype());
  const size_t ranks = static_cast<size_t>(group.size());
  std::vector<char> gathered(x.nbytes() * ranks);
  group.all_gather_bytes(x.raw(), gathered.data(), x.nbytes());
  regroup(gathered.data(), static_cast<char*>(outputs[0].raw()), split, ranks, /*into_rank_order=*/false);
}

void reduce_scatter_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  CollectiveGroup& group = collective_group_of("reduce_scatter", attrs);
  const Tensor& out = outputs[0];
  const DimSplit split = split_at(out.shape(), attrs.get_int("dim"), out.dtype());
  const size_t ranks = static_cast<size_t>(group.size());
  std::vector<char> blocks(out.nbytes() * ranks);
  regroup(static_cast<const char*>(inputs[0].raw()), blocks.data(), split, ranks, /*into_rank_order=*/true);
  group.reduce_scatter_sum(blocks.data(), out.raw(), static_cast<size_t>(out.numel()), out.dtype());
}

void split_to_group_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  CollectiveGroup& group = collective_group_of("split_to_group", attrs);
  const Tensor& out = outputs[0];
  const DimSplit split = split_at(out.shape(), attrs.get_int("dim"), out.dtype());
  const size_t rank = static_cast<size_t>(group.rank()), ranks = static_cast<size_t>(group.size());
  const auto* from = static_cast<const char*>(inputs[0].raw());
  auto* to = static_cast<char*>(out.raw());
  for (size_t o = 0; o < split.outer; ++o) {
    std::memcpy(to + o * split.block_bytes, from + (o * ranks + rank) * split.block_bytes, split.block_bytes);
  }
}

void all_to_all_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  CollectiveGroup& group = collective_group_of("all_to_all", attrs);
  const Tensor& x = inputs[0];
  const size_t ranks = static_cast<size_t>(group.size());
  // The blocks along `dim` in rank order, exchanged, and back in tensor order.
  Shape block_shape = x.shape();
  block_shape[static_cast<size_t>(attrs.get_int("dim"))] /= static_cast<int64_t>(ranks);
  const DimSplit split = split_at(block_shape, attrs.get_int("dim"), x.dtype());
  std::vector<char> sent(x.nbytes()), received(x.nbytes());
  regroup(static_cast<const char*>(x.raw()), sent.data(), split, ranks, /*into_rank_order=*/true);
  group.all_to_all_bytes(sent.data(), received.data(), x.nbytes() / ranks);
  regroup(received.data(), static_cast<char*>(outputs[0].raw()), split, ranks, /*into_rank_order=*/false);
}

void send_to_stage_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  CollectiveGroup& group = collective_group_of("send_to_stage", attrs);
  copy_input(inputs, outputs);
  group.send_bytes(inputs[0].raw(), inputs[0].nbytes(), static_cast<int>(attrs.get_int("peer")),
                   parse_stage_flow("send_to_stage", attrs));
}

void receive_from_stage_kernel(const Tensors&, const Tensors& outputs, const Attrs& attrs) {
  CollectiveGroup& group = collective_group_of("receive_from_stage", attrs);
  group.receive_bytes(outputs[0].raw(), outputs[0].nbytes(), static_cast<int>(attrs.get_int("peer")),
                      parse_stage_flow("receive_from_stage", attrs));
}

}  // namespace strata
