#include "comm/communicator.h"

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "comm/call_phases.h"
#include "comm/calls.h"
#include "core/error.h"

namespace strata::comm {
namespace {

// Tags separate calls in flight on one communicator; MPI guarantees at least 32767.
constexpr uint64_t kTagSpace = 32000;

int tag_of(uint64_t sequence) { return static_cast<int>(sequence % kTagSpace) + 1; }

void require_reducible(DType dtype, std::string_view what) {
  if (dtype != DType::F32 && dtype != DType::BF16) {
    fail("{}: reductions support f32 and bf16 buffers, not {}", what, dtype_name(dtype));
  }
}

void require_buffer(const void* data, size_t count, std::string_view what, std::string_view which) {
  if (count > 0 && data == nullptr) fail("{}: the {} buffer is null for {} elements", what, which, count);
}

std::shared_ptr<Operation> launch(GroupState& group, const std::shared_ptr<GroupState>& owner, const Channel& channel,
                                  uint64_t sequence, CallSpec spec, const void* in, void* out) {
  OpLabel label;
  label.kind = spec.barrier ? "barrier" : collective_name(spec.op).data();
  if (!spec.barrier) {
    label.algorithm = spec.algorithm;
    label.dtype = spec.dtype;
    label.bytes = spec.count * dtype_size(spec.dtype);
    if (spec.op == Collective::ReduceScatter || spec.op == Collective::AllGather || spec.op == Collective::AllToAll) {
      label.bytes *= group.size();
    }
    if (spec.op == Collective::AllToAllV) label.bytes = spec.layout->send_total() * dtype_size(spec.dtype);
    if (spec.op == Collective::AllReduce || spec.op == Collective::ReduceScatter) label.reduce = static_cast<int>(spec.reduce);
    if (spec.op == Collective::Broadcast) label.root = spec.root;
  }
  label.group = &group.name;
  label.group_rank = group.rank();
  label.group_size = group.size();
  label.sequence = sequence;
  auto op = std::make_shared<Operation>(label, group.config.timeout_s);
  op->keep_alive(owner);
  Context ctx{*op, channel, tag_of(sequence), group.config.chunk_bytes, group.config.pipeline_depth};
  op->set_body(collective_call(ctx, &group, spec, in, out));
  Engine::instance().launch(op);
  return op;
}

Task point_to_point(Context ctx, bool sending, const void* send_data, void* recv_data, size_t bytes, int peer) {
  if (sending) {
    co_await exchange(ctx, peer, send_data, bytes, -1, nullptr, 0);
  } else {
    co_await exchange(ctx, -1, nullptr, 0, peer, recv_data, bytes);
  }
}

void check_contiguous(const Tensor& tensor, std::string_view what, std::string_view name) {
  if (!tensor.defined()) fail("{}: tensor '{}' is undefined", what, name);
  if (!tensor.is_contiguous()) fail("{}: tensor '{}' must be contiguous", what, name);
}

}  // namespace

Handle::Handle(std::shared_ptr<Operation> op) : op_(std::move(op)) {}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    settle();
    op_ = std::move(other.op_);
  }
  return *this;
}

Handle::~Handle() { settle(); }

void Handle::settle() noexcept {
  if (!op_ || op_->finished()) return;
  try {
    Engine::instance().wait(*op_);
  } catch (const std::exception& error) {
    // Cannot throw from here; the call failed the same way on every rank.
    std::fprintf(stderr, "strata comm: a call nobody waited for failed: %s\n", error.what());
  }
}

bool Handle::test() {
  if (!op_) return true;
  return Engine::instance().test(*op_);
}

void Handle::wait() {
  if (op_) Engine::instance().wait(*op_);
}

std::string format_decision(const Decision& decision) {
  std::string text = fmt::format("{} {} B {}: {}", collective_name(decision.op), decision.bytes,
                                 dtype_name(decision.dtype), algorithm_name(decision.algorithm));
  if (!std::isnan(decision.predicted_s)) text += fmt::format(" {:.1f} us", decision.predicted_s * 1e6);
  text += fmt::format(" ({}", decision.reason);
  for (const auto& [algorithm, seconds] : decision.candidates) {
    if (algorithm != decision.algorithm) text += fmt::format("; {} {:.1f} us", algorithm_name(algorithm), seconds * 1e6);
  }
  return text + ")";
}

const GroupState& Communicator::state() const {
  if (!state_) fail("comm: this communicator is empty (default-constructed)");
  return *state_;
}
GroupState& Communicator::state() {
  if (!state_) fail("comm: this communicator is empty (default-constructed)");
  return *state_;
}

int Communicator::rank() const { return state().rank(); }
int Communicator::size() const { return state().size(); }
const std::string& Communicator::name() const { return state().name; }
int Communicator::world_rank_of(int rank) const { return state().data.world_rank.at(static_cast<size_t>(rank)); }
std::string Communicator::hostname_of(int rank) const { return world_hostname(world_rank_of(rank)); }
int Communicator::node_of(int rank) const { return state().node_of_rank.at(static_cast<size_t>(rank)); }
int Communicator::nodes() const { return state().nodes; }
const TopologyDesc& Communicator::topology() const { return state().topology; }
const ModelOptions& Communicator::model() const { return state().model; }
const LinkSource& Communicator::link_source() const { return state().link_source; }
const CommConfig& Communicator::config() const { return state().config; }
const Decision& Communicator::last_decision() const { return state().last_decision; }

namespace {

// Decisions a group keeps (its call shapes and pinned predictions); past this, it starts afresh.
constexpr size_t kKeptDecisions = 4096;

// map[key], made by `make` the first time it is asked for.
template <typename Map, typename Make>
const typename Map::mapped_type& remembered(Map& map, const typename Map::key_type& key, const Make& make) {
  auto found = map.find(key);
  if (found == map.end()) {
    if (map.size() > kKeptDecisions) map.clear();
    found = map.emplace(key, make()).first;
  }
  return found->second;
}

// The algorithm for one call: the caller's or the configuration's pin when it
// applies, else the cost model's cheapest (cached per shape).

Decision decide(const GroupState& group, Collective op, size_t count, DType dtype, Algorithm requested,
                bool with_candidates) {
  Decision decision;
  decision.op = op;
  decision.dtype = dtype;
  decision.bytes = count * dtype_size(dtype);
  CallShape shape{op, static_cast<double>(decision.bytes), dtype};
  std::string source = "requested by the call";
  Algorithm pinned = requested;
  if (pinned == Algorithm::Auto && group.config.pinned_for(op) != Algorithm::Auto) {
    pinned = group.config.pinned_for(op);
    source = "pinned by " + group.config.pinned_by;
  }
  std::string why;
  if (pinned != Algorithm::Auto && applicable(pinned, shape, group.topology, &why)) {
    decision.algorithm = pinned;
    decision.predicted_s = NAN;
    if (modeled(pinned)) {
      const auto key = std::make_tuple(static_cast<int>(op), decision.bytes, static_cast<int>(dtype),
                                       static_cast<int>(pinned));
      decision.predicted_s = remembered(group.pinned_predictions, key, [&] {
        return predict_seconds(shape, pinned, group.topology, group.model);
      });
    }
    decision.reason = std::move(source);
    return decision;
  }
  const auto key = std::make_tuple(static_cast<int>(op), decision.bytes, static_cast<int>(dtype));
  const Choice& choice =
      remembered(group.choices, key, [&] { return choose_algorithm(shape, group.topology, group.model); });
  decision.algorithm = choice.algorithm;
  decision.predicted_s = choice.predicted_s;
  if (with_candidates) decision.candidates = choice.candidates;
  decision.reason = pinned == Algorithm::Auto
                        ? "auto"
                        : fmt::format("fallback: {} {} but {}", algorithm_name(pinned), source, why);
  return decision;
}

}  // namespace

Decision Communicator::plan(Collective op, size_t count, DType dtype, Algorithm requested) const {
  return decide(state(), op, count, dtype, requested, true);
}

namespace {

// Decides, labels and launches one collective call.
Handle start_collective(const std::shared_ptr<GroupState>& owner, CallSpec spec, size_t model_count, const void* in,
                        void* out, Algorithm requested) {
  GroupState& group = *owner;
  uint64_t sequence = ++group.sequence;
  if (spec.barrier) {
    CallPhases::stamp(CallPoint::Decided);
    spec.algorithm = Algorithm::Ring;
    return Handle(launch(group, owner, group.data, sequence, spec, nullptr, nullptr));
  }
  Decision decision = decide(group, spec.op, model_count, spec.dtype, requested, group.config.log_decisions);
  CallPhases::stamp(CallPoint::Decided);
  spec.algorithm = decision.algorithm;
  if (spec.algorithm == Algorithm::Hierarchical) {
    CallShape shape{spec.op, static_cast<double>(decision.bytes), spec.dtype};
    spec.across = hierarchical_inner_algorithm(shape, group.topology, group.model);
  }
  if (runs_on_segment(group, spec)) group.shm_queue.push_back(sequence);
  if (group.config.log_decisions && group.rank() == 0) {
    std::fprintf(stderr, "strata comm [%s] call #%llu %s\n", group.name.c_str(),
                 static_cast<unsigned long long>(sequence), format_decision(decision).c_str());
  }
  group.last_decision = std::move(decision);
  return Handle(launch(group, owner, group.data, sequence, spec, in, out));
}

}  // namespace

Handle Communicator::all_reduce_async(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                      Algorithm algorithm) {
  CallPhases::stamp(CallPoint::Entered);
  require_reducible(dtype, "all_reduce");
  require_buffer(in, count, "all_reduce", "input");
  require_buffer(out, count, "all_reduce", "output");
  CallSpec spec{Collective::AllReduce, count, dtype, op};
  return start_collective(state_, spec, count, in, out, algorithm);
}

Handle Communicator::reduce_scatter_async(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                          Algorithm algorithm) {
  CallPhases::stamp(CallPoint::Entered);
  require_reducible(dtype, "reduce_scatter");
  require_buffer(in, count, "reduce_scatter", "input");
  require_buffer(out, count, "reduce_scatter", "output");
  CallSpec spec{Collective::ReduceScatter, count, dtype, op};
  return start_collective(state_, spec, count * static_cast<size_t>(size()), in, out, algorithm);
}

Handle Communicator::all_gather_async(const void* in, void* out, size_t count, DType dtype, Algorithm algorithm) {
  CallPhases::stamp(CallPoint::Entered);
  require_buffer(in, count, "all_gather", "input");
  require_buffer(out, count, "all_gather", "output");
  CallSpec spec{Collective::AllGather, count, dtype};
  return start_collective(state_, spec, count * static_cast<size_t>(size()), in, out, algorithm);
}

Handle Communicator::broadcast_async(void* data, size_t count, DType dtype, int root, Algorithm algorithm) {
  CallPhases::stamp(CallPoint::Entered);
  if (root < 0 || root >= size()) fail("broadcast: root {} is not a rank of group '{}' (size {})", root, name(), size());
  require_buffer(data, count, "broadcast", "data");
  CallSpec spec{Collective::Broadcast, count, dtype};
  spec.root = root;
  return start_collective(state_, spec, count, data, data, algorithm);
}

namespace {

void require_disjoint(const void* in, size_t in_bytes, const void* out, size_t out_bytes, std::string_view what) {
  auto a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  if (in_bytes > 0 && out_bytes > 0 && a < b + out_bytes && b < a + in_bytes) {
    fail("{}: the input and output buffers overlap (peers read the input while the output is written)", what);
  }
}

}  // namespace

Handle Communicator::all_to_all_async(const void* in, void* out, size_t count, DType dtype, Algorithm algorithm) {
  CallPhases::stamp(CallPoint::Entered);
  require_buffer(in, count, "all_to_all", "input");
  require_buffer(out, count, "all_to_all", "output");
  size_t bytes = count * static_cast<size_t>(size()) * dtype_size(dtype);
  require_disjoint(in, bytes, out, bytes, "all_to_all");
  CallSpec spec{Collective::AllToAll, count, dtype};
  spec.layout = std::make_shared<const ExchangeLayout>(ExchangeLayout::uniform(count, size()));
  return start_collective(state_, spec, count * static_cast<size_t>(size()), in, out, algorithm);
}

Handle Communicator::all_to_all_v_async(const void* in, std::span<const size_t> send_counts, void* out,
                                        std::span<const size_t> recv_counts, DType dtype, Algorithm algorithm) {
  CallPhases::stamp(CallPoint::Entered);
  auto layout = std::make_shared<const ExchangeLayout>(ExchangeLayout::packed(send_counts, recv_counts, size(), "all_to_all_v"));
  const auto me = static_cast<size_t>(rank());
  if (send_counts[me] != recv_counts[me]) {
    fail("all_to_all_v: rank {} sends itself {} elements but expects {} from itself", rank(), send_counts[me],
         recv_counts[me]);
  }
  require_buffer(in, layout->send_total(), "all_to_all_v", "input");
  require_buffer(out, layout->recv_total(), "all_to_all_v", "output");
  const size_t width = dtype_size(dtype);
  require_disjoint(in, layout->send_total() * width, out, layout->recv_total() * width, "all_to_all_v");
  CallSpec spec{Collective::AllToAllV, 0, dtype};
  spec.layout = std::move(layout);
  return start_collective(state_, spec, 0, in, out, algorithm);
}

std::vector<size_t> Communicator::all_to_all_counts(std::span<const size_t> send_counts) {
  if (send_counts.size() != static_cast<size_t>(size())) {
    fail("all_to_all_counts: {} counts for a group of {} ranks", send_counts.size(), size());
  }
  std::vector<int64_t> sent(send_counts.begin(), send_counts.end()), received(send_counts.size());
  all_to_all(sent.data(), received.data(), 1, DType::I64);
  return {received.begin(), received.end()};
}

Handle Communicator::barrier_async() {
  CallPhases::stamp(CallPoint::Entered);
  CallSpec spec;
  spec.barrier = true;
  return start_collective(state_, spec, 0, nullptr, nullptr, Algorithm::Auto);
}

namespace {

Handle start_point_to_point(const std::shared_ptr<GroupState>& owner, bool sending, const void* send_data,
                            void* recv_data, size_t count, DType dtype, int peer) {
  GroupState& group = *owner;
  const char* verb = sending ? "send" : "recv";
  if (peer < 0 || peer >= group.size() || peer == group.rank()) {
    fail("{}: peer {} is not another rank of group '{}' (size {}, this rank {})", verb, peer, group.name, group.size(),
         group.rank());
  }
  size_t bytes = count * dtype_size(dtype);
  OpLabel label;
  label.kind = verb;
  label.bytes = bytes;
  label.dtype = dtype;
  label.peer = peer;
  label.group = &group.name;
  label.group_rank = group.rank();
  label.group_size = group.size();
  label.sequence = ++group.p2p_sequence;
  auto op = std::make_shared<Operation>(std::move(label), group.config.timeout_s);
  op->keep_alive(owner);
  // One tag: messages between two ranks match in the order they were posted.
  Context ctx{*op, group.p2p, 0, group.config.chunk_bytes, group.config.pipeline_depth};
  op->set_body(point_to_point(ctx, sending, send_data, recv_data, bytes, peer));
  Engine::instance().launch(op);
  return Handle(op);
}

}  // namespace

Handle Communicator::send_async(const void* data, size_t count, DType dtype, int peer) {
  require_buffer(data, count, "send", "data");
  return start_point_to_point(state_, true, data, nullptr, count, dtype, peer);
}

Handle Communicator::recv_async(void* data, size_t count, DType dtype, int peer) {
  require_buffer(data, count, "recv", "data");
  return start_point_to_point(state_, false, nullptr, data, count, dtype, peer);
}

Handle Communicator::all_reduce_async(Tensor& tensor, ReduceOp op) {
  check_contiguous(tensor, "all_reduce", "tensor");
  return all_reduce_async(tensor.raw(), tensor.raw(), static_cast<size_t>(tensor.numel()), tensor.dtype(), op);
}

void Communicator::broadcast(Tensor& tensor, int root) {
  check_contiguous(tensor, "broadcast", "tensor");
  broadcast(tensor.raw(), static_cast<size_t>(tensor.numel()), tensor.dtype(), root);
}

void Communicator::all_gather(const Tensor& in, Tensor& out) {
  check_contiguous(in, "all_gather", "in");
  check_contiguous(out, "all_gather", "out");
  if (in.dtype() != out.dtype() || out.numel() != in.numel() * size()) {
    fail("all_gather: out ({} elements of {}) must hold {} x in ({} elements of {})", out.numel(),
         dtype_name(out.dtype()), size(), in.numel(), dtype_name(in.dtype()));
  }
  all_gather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), in.dtype());
}

void Communicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  check_contiguous(in, "reduce_scatter", "in");
  check_contiguous(out, "reduce_scatter", "out");
  if (in.dtype() != out.dtype() || in.numel() != out.numel() * size()) {
    fail("reduce_scatter: in ({} elements of {}) must hold {} x out ({} elements of {})", in.numel(),
         dtype_name(in.dtype()), size(), out.numel(), dtype_name(out.dtype()));
  }
  reduce_scatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()), in.dtype(), op);
}

}  // namespace strata::comm
