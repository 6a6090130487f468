// The communication the planner prices is the runtime graph's, and it is
// Megatron's pattern (Narayanan et al. 2021, §3.2; Korthikanti et al. 2022,
// §4.2.2): per layer two all-reduces of the [b, s, h] activation forward and
// two backward; under sequence parallelism each becomes an all-gather and a
// reduce-scatter of the same buffer, and the replicated parameters' gradients
// are summed over the group. The stage boundary carries [b, s, h] (split by
// sequence under sequence parallelism), and the vocabulary-parallel loss
// combines one f32 value per position twice.
#include <gtest/gtest.h>

#include <map>

#include "planner/model_comm.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

using Counts = std::map<std::pair<CommPattern, double>, int>;

Counts counts(const std::vector<CommWork>& calls, int ranks) {
  Counts tally;
  for (const CommWork& call : calls) {
    EXPECT_EQ(call.ranks, ranks) << call.label;
    ++tally[{call.pattern, call.bytes}];
  }
  return tally;
}

TEST(ModelComm, TensorParallelLayersCommunicateAsMegatronDoes) {
  const ModelConfig config = testing::gpt2_config(4, 4, 32, 4099, 16);
  const int64_t b = 2, s = 16, h = 32;
  const double activation = static_cast<double>(b * s * h) * 4, positions = static_cast<double>(b * s) * 4;
  const ModelComm plain = model_comm(config, b, s, 2, /*sp=*/false, DType::F32);
  EXPECT_EQ(counts(plain.layer.forward, 2), (Counts{{{CommPattern::AllReduce, activation}, 2}}));
  EXPECT_EQ(counts(plain.layer.backward, 2), (Counts{{{CommPattern::AllReduce, activation}, 2}}));
  // The vocabulary-parallel embedding sums its partial lookups; the LM head's input gradient is summed.
  EXPECT_EQ(counts(plain.embedding.forward, 2), (Counts{{{CommPattern::AllReduce, activation}, 1}}));
  EXPECT_EQ(counts(plain.head.forward, 2), (Counts{{{CommPattern::AllReduce, positions}, 1},
                                                    {{CommPattern::AllGather, 2 * positions}, 1}}));
  EXPECT_EQ(counts(plain.head.backward, 2), (Counts{{{CommPattern::AllReduce, activation}, 1}}));
  EXPECT_EQ(plain.boundary_bytes, activation);

  const ModelComm split = model_comm(config, b, s, 2, /*sp=*/true, DType::F32);
  EXPECT_EQ(counts(split.layer.forward, 2), (Counts{{{CommPattern::AllGather, activation}, 2},
                                                     {{CommPattern::ReduceScatter, activation}, 2}}));
  // Backward: the conjugates, plus the sums of the gradients of what the sequence split replicates
  // (both LayerNorms' weight and bias, both row-parallel biases).
  EXPECT_EQ(counts(split.layer.backward, 2), (Counts{{{CommPattern::AllGather, activation}, 2},
                                                      {{CommPattern::ReduceScatter, activation}, 2},
                                                      {{CommPattern::AllReduce, h * 4.0}, 6}}));
  EXPECT_EQ(split.boundary_bytes, activation / 2);
  EXPECT_TRUE(model_comm(config, b, s, 1, false, DType::F32).layer.forward.empty());
}

}  // namespace
}  // namespace strata
