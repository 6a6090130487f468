#include "parallel/group_collectives.h"

#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "core/error.h"
#include "ops/collective_group.h"

namespace strata {

namespace {

// A comm group behind the ops' interface. f32 and bf16 use the comm layer's
// sums (fp32 accumulation, one rounding, the same bits on every rank); f64
// and f16, which it does not reduce, are gathered and added here in rank
// order (f64 in f64, f16 in f32), the same on every rank too.
// A point-to-point dimension's group (the pipeline's) also carries the stage boundary: each flow on
// a communicator of its own (the same ranks), so that between two stages
// activations and gradients each arrive in the order sent, even when
// interleaving makes one pair of stages carry both.
class CommGroup final : public CollectiveGroup {
 public:
  CommGroup(comm::Communicator group, bool stage_flows) : group_(std::move(group)) {
    if (!stage_flows) return;
    activations_ = group_.split(0, group_.rank(), group_.name() + "-activations");
    gradients_ = group_.split(0, group_.rank(), group_.name() + "-gradients");
  }
  int size() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }

  void all_reduce_sum(void* data, size_t count, DType dtype) override {
    if (dtype == DType::F32 || dtype == DType::BF16) {
      group_.all_reduce(data, data, count, dtype, comm::ReduceOp::Sum);
      return;
    }
    const size_t bytes = count * dtype_size(dtype);
    std::vector<char> all(bytes * static_cast<size_t>(size()));
    all_gather_bytes(data, all.data(), bytes);
    add_in_rank_order(all.data(), bytes, data, count, dtype);
  }

  void all_gather_bytes(const void* in, void* out, size_t bytes) override {
    group_.all_gather(in, out, units(bytes), DType::BF16);
  }

  void all_to_all_bytes(const void* in, void* out, size_t bytes) override {
    group_.all_to_all(in, out, units(bytes), DType::BF16);
  }

  void all_to_all_v_bytes(const void* in, std::span<const size_t> send_bytes, void* out,
                          std::span<const size_t> recv_bytes) override {
    std::vector<size_t> send_units, recv_units;
    for (size_t bytes : send_bytes) send_units.push_back(units(bytes));
    for (size_t bytes : recv_bytes) recv_units.push_back(units(bytes));
    group_.all_to_all_v(in, send_units, out, recv_units, DType::BF16);
  }

  void reduce_scatter_sum(const void* in, void* out, size_t count, DType dtype) override {
    if (dtype == DType::F32 || dtype == DType::BF16) {
      group_.reduce_scatter(in, out, count, dtype, comm::ReduceOp::Sum);
      return;
    }
    const size_t bytes = count * dtype_size(dtype), whole = bytes * static_cast<size_t>(size());
    std::vector<char> all(whole * static_cast<size_t>(size()));
    all_gather_bytes(in, all.data(), whole);
    // Rank q's block rank() sits at q * whole + rank() * bytes.
    add_in_rank_order(all.data() + static_cast<size_t>(rank()) * bytes, whole, out, count, dtype);
  }

  void send_bytes(const void* data, size_t bytes, int peer, StageFlow flow) override {
    // Leaves from a copy, so the sender never waits for the receiver inside a step (a wait there can
    // deadlock two stages that each wait for the other to receive).
    Send& send = sends_.emplace_back();
    send.copy.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    send.handle = flow_group(flow).send_async(send.copy.data(), units(bytes), DType::BF16, peer);
  }

  void receive_bytes(void* data, size_t bytes, int peer, StageFlow flow) override {
    flow_group(flow).recv(data, units(bytes), DType::BF16, peer);
  }

  double finish_sends() override {
    const auto start = std::chrono::steady_clock::now();
    for (Send& send : sends_) send.handle.wait();
    sends_.clear();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  // data[i] = the sum over ranks r of the element i at all + r * stride (f64 in f64, f16 in f32).
  void add_in_rank_order(const char* all, size_t stride, void* data, size_t count, DType dtype) const {
    STRATA_CHECK(dtype == DType::F64 || dtype == DType::F16, "a sum of {} outside the comm layer", dtype_name(dtype));
    for (size_t i = 0; i < count; ++i) {
      if (dtype == DType::F64) {
        double sum = 0;
        for (int r = 0; r < size(); ++r) sum += reinterpret_cast<const double*>(all + r * stride)[i];
        static_cast<double*>(data)[i] = sum;
      } else {
        float sum = 0;
        for (int r = 0; r < size(); ++r) sum += fp16_to_float(reinterpret_cast<const fp16*>(all + r * stride)[i]);
        static_cast<fp16*>(data)[i] = float_to_fp16(sum);
      }
    }
  }

  // The comm layer moves any dtype; every dtype's size is even, so bytes travel as 2-byte units.
  static size_t units(size_t bytes) {
    STRATA_CHECK(bytes % 2 == 0, "a transfer of {} bytes, not whole 16-bit units", bytes);
    return bytes / 2;
  }

  comm::Communicator& flow_group(StageFlow flow) {
    std::optional<comm::Communicator>& group = flow == StageFlow::Activations ? activations_ : gradients_;
    STRATA_CHECK(group.has_value(), "a stage transfer on a group that is not the pipeline's");
    return *group;
  }

  struct Send {
    std::vector<char> copy;
    comm::Handle handle;
  };

  comm::Communicator group_;
  std::optional<comm::Communicator> activations_, gradients_;
  std::vector<Send> sends_;
};

}  // namespace

void register_mesh_groups(DeviceMesh& mesh) {
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    register_collective_group(dimension.name,
                              std::make_shared<CommGroup>(mesh.group(dimension.name), dimension.point_to_point));
  }
}

void unregister_mesh_groups() {
  for (const ParallelDimension& dimension : parallel_dimensions()) register_collective_group(dimension.name, nullptr);
}

}  // namespace strata
