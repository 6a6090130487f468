// Every algorithm x collective x dtype x count, on the flat world and on a
// simulated two-level world, against a serial reference each rank computes
// from everyone's inputs. Small-integer inputs must match bit for bit; uniform
// floats within fp32 rounding, and identically on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "mpi/comm_test_support.h"

namespace strata::comm::testing {
namespace {

const std::vector<size_t> kCounts = {0, 1, 2, 3, 5, 7, 13, 31, 257, 4099};
const std::vector<DType> kDtypes = {DType::F32, DType::BF16};

std::vector<Algorithm> algorithms_for(Collective op, const Communicator& group) {
  std::vector<Algorithm> result = {Algorithm::Auto};
  for (Algorithm algorithm : kConcreteAlgorithms) {
    if (!implements(algorithm, op)) continue;
    if (!applicable(algorithm, {op, 1024.0}, group.topology())) continue;  // hierarchical, shm
    result.push_back(algorithm);
  }
  return result;
}

std::string label(const Communicator& group, Collective op, Algorithm algorithm, DType dtype, size_t count,
                  const std::string& detail) {
  return fmt::format("{} group '{}' ({} ranks, {} nodes) {} {} count {} {}", collective_name(op), group.name(),
                     group.size(), group.nodes(), algorithm_name(algorithm), dtype_name(dtype), count, detail);
}

// The reduction of element `index` over all ranks, from the inputs alone.
double reference(Values values, uint32_t seed, int ranks, size_t index, DType dtype, ReduceOp op) {
  if (op == ReduceOp::Max) {
    float best = input_value(values, seed, 0, index, dtype);
    for (int rank = 1; rank < ranks; ++rank) best = std::max(best, input_value(values, seed, rank, index, dtype));
    return best;
  }
  double sum = 0.0;
  for (int rank = 0; rank < ranks; ++rank) sum += input_value(values, seed, rank, index, dtype);
  return sum;
}

// Small integers: the exact sum in fp32, divided once for avg, rounded once to the dtype.
float exact_expected(uint32_t seed, int ranks, size_t index, DType dtype, ReduceOp op) {
  float value = static_cast<float>(reference(Values::SmallIntegers, seed, ranks, index, dtype, op));
  if (op == ReduceOp::Avg) value /= static_cast<float>(ranks);
  return dtype == DType::BF16 ? bf16_to_float(float_to_bf16(value)) : value;
}

// Uniform floats: fp32 accumulation error (bounded by ranks * eps * sum of |x|) plus the final rounding.
bool close_enough(float got, double want, double magnitude, int ranks, DType dtype) {
  double accumulation = 4.0 * ranks * 0x1.0p-23 * magnitude;
  double rounding = dtype == DType::BF16 ? 0x1.0p-8 * std::abs(want) : 0x1.0p-23 * std::abs(want);
  return std::abs(got - want) <= accumulation + rounding + 1e-30;
}

struct Variant {
  Values values;
  ReduceOp op;
  bool in_place;
};

const std::vector<Variant> kReduceVariants = {{Values::SmallIntegers, ReduceOp::Sum, false},
                                              {Values::SmallIntegers, ReduceOp::Avg, true},
                                              {Values::SmallIntegers, ReduceOp::Max, false},
                                              {Values::Uniform, ReduceOp::Sum, false},
                                              {Values::Uniform, ReduceOp::Max, true}};

std::string variant_name(const Variant& variant) {
  return fmt::format("{} {}{}", variant.values == Values::SmallIntegers ? "integers" : "uniform",
                     reduce_op_name(variant.op), variant.in_place ? " in place" : "");
}

TEST(CollectiveMatrix, AllReduce) {
  uint32_t seed = 1;
  for (Communicator* group : test_groups()) {
    const int p = group->size();
    for (Algorithm algorithm : algorithms_for(Collective::AllReduce, *group)) {
      for (DType dtype : kDtypes) {
        for (size_t count : kCounts) {
          for (const Variant& variant : kReduceVariants) {
            ++seed;
            std::vector<std::byte> in = make_buffer(count, dtype), out = make_buffer(count, dtype);
            for (size_t i = 0; i < count; ++i) store(in, dtype, i, input_value(variant.values, seed, group->rank(), i, dtype));
            std::vector<std::byte>& target = variant.in_place ? in : out;
            group->all_reduce(in.data(), target.data(), count, dtype, variant.op, algorithm);
            size_t wrong = 0;
            for (size_t i = 0; i < count; ++i) {
              float got = load(target, dtype, i);
              if (variant.values == Values::SmallIntegers || variant.op == ReduceOp::Max) {
                float want = variant.values == Values::SmallIntegers
                                 ? exact_expected(seed, p, i, dtype, variant.op)
                                 : static_cast<float>(reference(variant.values, seed, p, i, dtype, variant.op));
                wrong += got != want;
              } else {
                double magnitude = 0.0;
                for (int rank = 0; rank < p; ++rank) magnitude += std::abs(input_value(variant.values, seed, rank, i, dtype));
                wrong += !close_enough(got, reference(variant.values, seed, p, i, dtype, variant.op), magnitude, p, dtype);
              }
            }
            std::string what = label(*group, Collective::AllReduce, algorithm, dtype, count, variant_name(variant));
            EXPECT_EQ(wrong, 0u) << what;
            EXPECT_TRUE(identical_on_all_ranks(*group, target)) << what;
          }
        }
      }
    }
  }
}

TEST(CollectiveMatrix, ReduceScatter) {
  uint32_t seed = 100000;
  for (Communicator* group : test_groups()) {
    const int p = group->size();
    for (Algorithm algorithm : algorithms_for(Collective::ReduceScatter, *group)) {
      for (DType dtype : kDtypes) {
        for (size_t count : kCounts) {
          for (const Variant& variant : kReduceVariants) {
            ++seed;
            size_t total = count * static_cast<size_t>(p);
            std::vector<std::byte> in = make_buffer(total, dtype), out = make_buffer(count, dtype);
            for (size_t i = 0; i < total; ++i) store(in, dtype, i, input_value(variant.values, seed, group->rank(), i, dtype));
            group->reduce_scatter(in.data(), out.data(), count, dtype, variant.op, algorithm);
            size_t wrong = 0;
            for (size_t i = 0; i < count; ++i) {
              size_t index = static_cast<size_t>(group->rank()) * count + i;
              float got = load(out, dtype, i);
              if (variant.values == Values::SmallIntegers || variant.op == ReduceOp::Max) {
                float want = variant.values == Values::SmallIntegers
                                 ? exact_expected(seed, p, index, dtype, variant.op)
                                 : static_cast<float>(reference(variant.values, seed, p, index, dtype, variant.op));
                wrong += got != want;
              } else {
                double magnitude = 0.0;
                for (int rank = 0; rank < p; ++rank) magnitude += std::abs(input_value(variant.values, seed, rank, index, dtype));
                wrong += !close_enough(got, reference(variant.values, seed, p, index, dtype, variant.op), magnitude, p, dtype);
              }
            }
            EXPECT_EQ(wrong, 0u) << label(*group, Collective::ReduceScatter, algorithm, dtype, count, variant_name(variant));
          }
        }
      }
    }
  }
}

TEST(CollectiveMatrix, AllGather) {
  uint32_t seed = 200000;
  for (Communicator* group : test_groups()) {
    const int p = group->size();
    for (Algorithm algorithm : algorithms_for(Collective::AllGather, *group)) {
      for (DType dtype : kDtypes) {
        for (size_t count : kCounts) {
          ++seed;
          std::vector<std::byte> in = make_buffer(count, dtype), out = make_buffer(count * static_cast<size_t>(p), dtype);
          for (size_t i = 0; i < count; ++i) store(in, dtype, i, input_value(Values::Uniform, seed, group->rank(), i, dtype));
          group->all_gather(in.data(), out.data(), count, dtype, algorithm);
          size_t wrong = 0;
          for (int from = 0; from < p; ++from) {
            for (size_t i = 0; i < count; ++i) {
              wrong += load(out, dtype, static_cast<size_t>(from) * count + i) != input_value(Values::Uniform, seed, from, i, dtype);
            }
          }
          EXPECT_EQ(wrong, 0u) << label(*group, Collective::AllGather, algorithm, dtype, count, "uniform");
        }
      }
    }
  }
}

TEST(CollectiveMatrix, Broadcast) {
  uint32_t seed = 300000;
  for (Communicator* group : test_groups()) {
    const int p = group->size();
    for (Algorithm algorithm : algorithms_for(Collective::Broadcast, *group)) {
      for (DType dtype : kDtypes) {
        for (size_t count : kCounts) {
          for (int root : {0, p - 1, p / 2}) {
            ++seed;
            std::vector<std::byte> data = make_buffer(count, dtype);
            for (size_t i = 0; i < count; ++i) {
              float mine = group->rank() == root ? input_value(Values::Uniform, seed, root, i, dtype) : -99.0f;
              store(data, dtype, i, mine);
            }
            group->broadcast(data.data(), count, dtype, root, algorithm);
            size_t wrong = 0;
            for (size_t i = 0; i < count; ++i) wrong += load(data, dtype, i) != input_value(Values::Uniform, seed, root, i, dtype);
            EXPECT_EQ(wrong, 0u) << label(*group, Collective::Broadcast, algorithm, dtype, count, fmt::format("root {}", root));
          }
        }
      }
    }
  }
}

// Blocks larger than the default pipeline chunk, on the default settings.
TEST(CollectiveMatrix, LargeAllReduceWithDefaultChunks) {
  CommConfig config = test_config();
  config.chunk_bytes = kDefaultChunkBytes;
  config.pipeline_depth = 4;
  static Communicator world = Communicator::world(config);
  const int p = world.size();
  const size_t count = 3 * kDefaultChunkBytes / sizeof(float) * static_cast<size_t>(p) + 17;
  for (Algorithm algorithm : {Algorithm::Ring, Algorithm::RecursiveHalvingDoubling, Algorithm::Auto}) {
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = input_value(Values::SmallIntegers, 7, world.rank(), i, DType::F32);
    world.all_reduce(in.data(), out.data(), count, DType::F32, ReduceOp::Sum, algorithm);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += out[i] != exact_expected(7, p, i, DType::F32, ReduceOp::Sum);
    EXPECT_EQ(wrong, 0u) << algorithm_name(algorithm) << " count " << count;
  }
}

// Results of 16 MiB and more are written around the caches (streaming stores).
TEST(CollectiveMatrix, LargeDirectReadResults) {
  Communicator& world = flat_world();
  if (!applicable(Algorithm::DirectRead, {Collective::AllReduce, 4.0}, world.topology()) || world.size() > 4) {
    GTEST_SKIP() << "direct read tested at this size up to 4 ranks (and where the host allows it)";
  }
  const int p = world.size();
  const size_t count = (size_t{16} << 20) / sizeof(float) + 5;
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = input_value(Values::SmallIntegers, 11, world.rank(), i, DType::F32);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    world.all_reduce(in.data(), out.data(), count, DType::F32, op, Algorithm::DirectRead);
    EXPECT_EQ(world.last_decision().algorithm, Algorithm::DirectRead);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += out[i] != exact_expected(11, p, i, DType::F32, op);
    EXPECT_EQ(wrong, 0u) << reduce_op_name(op);
  }
}

}  // namespace
}  // namespace strata::comm::testing
