#include "mpi/comm_test_support.h"

#include <mpi.h>

#include <cstring>
#include <memory>

namespace strata::comm::testing {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

}  // namespace

CommConfig test_config() {
  CommConfig config;
  config.topology_file = std::string(STRATA_COMM_TEST_DATA) + "/test_links.toml";
  config.chunk_bytes = 512;
  config.pipeline_depth = 3;
  config.timeout_s = 60;
  // A small exchange area, so that the all-to-all tests' blocks grow it and
  // overflow it, and a staging limit past it that the bigger exchanges exceed
  // (fixed, where the default would follow this host's cache).
  config.exchange_staging_bytes = size_t{2} << 20;
  config.all_to_all_staging_bytes = size_t{3} << 20;
  config.apply_environment();
  return config;
}

Communicator& flat_world() {
  static Communicator world = Communicator::world(test_config());
  return world;
}

Communicator* two_level_world() {
  static std::unique_ptr<Communicator> world = [] {
    int size = flat_world().size();
    int per_node = size == 6 ? 3 : (size >= 4 && size % 2 == 0 ? 2 : 0);
    if (per_node == 0) return std::unique_ptr<Communicator>();
    CommConfig config = test_config();
    config.simulated_ranks_per_node = per_node;
    return std::make_unique<Communicator>(Communicator::world(config));
  }();
  return world.get();
}

Communicator& unstaged_world() {
  static Communicator world = [] {
    CommConfig config = test_config();
    config.exchange_staging_bytes = 0;
    return Communicator::world(config);
  }();
  return world;
}

std::vector<Communicator*> test_groups() {
  std::vector<Communicator*> groups = {&flat_world()};
  if (Communicator* two_level = two_level_world()) groups.push_back(two_level);
  groups.push_back(&unstaged_world());
  return groups;
}

float input_value(Values values, uint32_t seed, int rank, size_t index, DType dtype) {
  uint64_t bits = mix((uint64_t{seed} << 48) ^ (uint64_t(rank) << 40) ^ index);
  float value = values == Values::SmallIntegers ? static_cast<float>(static_cast<int>(bits % 9) - 4)
                                                : static_cast<float>(bits >> 11) * 0x1.0p-52f - 1.0f;
  return dtype == DType::BF16 ? bf16_to_float(float_to_bf16(value)) : value;
}

std::vector<std::byte> make_buffer(size_t count, DType dtype) {
  return std::vector<std::byte>(std::max<size_t>(count, 1) * dtype_size(dtype));
}

void store(std::vector<std::byte>& buffer, DType dtype, size_t index, float value) {
  if (dtype == DType::BF16) {
    bf16 half = float_to_bf16(value);
    std::memcpy(buffer.data() + index * 2, &half, 2);
  } else {
    std::memcpy(buffer.data() + index * 4, &value, 4);
  }
}

float load(const std::vector<std::byte>& buffer, DType dtype, size_t index) {
  if (dtype == DType::BF16) {
    bf16 half;
    std::memcpy(&half, buffer.data() + index * 2, 2);
    return bf16_to_float(half);
  }
  float value;
  std::memcpy(&value, buffer.data() + index * 4, 4);
  return value;
}

bool identical_on_all_ranks(const Communicator& group, const std::vector<std::byte>& bytes) {
  uint64_t hash = 1469598103934665603ull;
  for (std::byte b : bytes) hash = (hash ^ static_cast<uint64_t>(b)) * 1099511628211ull;
  std::vector<uint64_t> hashes(static_cast<size_t>(group.size()));
  std::vector<int> members(static_cast<size_t>(group.size()));
  for (int rank = 0; rank < group.size(); ++rank) members[static_cast<size_t>(rank)] = group.world_rank_of(rank);
  // Every world rank takes part; only this group's hashes matter.
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::vector<uint64_t> all(static_cast<size_t>(world_size));
  MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int member : members) {
    if (all[static_cast<size_t>(member)] != all[static_cast<size_t>(members[0])]) return false;
  }
  return true;
}

}  // namespace strata::comm::testing
