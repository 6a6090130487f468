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
#include "planner/model_spec.h"
#include "planner_test_support.h"
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

// A Llama's q, k and v projections read one normalized value, and its gate and up projections another. Strata's
// runtime enters the tensor-parallel region per linear (an all-gather each under sequence parallelism, a backward
// all-reduce each without); Megatron and torchtitan enter once per block, which gives Megatron's pattern above:
// two entries and two exits a layer each way, plus the replicated norm weights' gradient sums.
TEST(ModelComm, SharedTensorParallelInputEntersOncePerBlock) {
  ModelConfig config = testing::small_llama_config();
  const int64_t b = 2, s = 16, h = 32;
  const double activation = static_cast<double>(b * s * h) * 4, norm_weight = h * 4.0;
  const auto shared = TensorParallelInput::Shared;

  const ModelComm split = model_comm(config, b, s, 2, /*sp=*/true, DType::F32);
  EXPECT_EQ(counts(split.layer.forward, 2), (Counts{{{CommPattern::AllGather, activation}, 5},
                                                     {{CommPattern::ReduceScatter, activation}, 2}}));
  const ModelComm split_shared = model_comm(config, b, s, 2, /*sp=*/true, DType::F32, shared);
  EXPECT_EQ(counts(split_shared.layer.forward, 2), (Counts{{{CommPattern::AllGather, activation}, 2},
                                                            {{CommPattern::ReduceScatter, activation}, 2}}));
  EXPECT_EQ(counts(split_shared.layer.backward, 2), (Counts{{{CommPattern::AllGather, activation}, 2},
                                                             {{CommPattern::ReduceScatter, activation}, 2},
                                                             {{CommPattern::AllReduce, norm_weight}, 2}}));

  const ModelComm plain = model_comm(config, b, s, 2, /*sp=*/false, DType::F32);
  EXPECT_EQ(counts(plain.layer.backward, 2), (Counts{{{CommPattern::AllReduce, activation}, 5}}));
  const ModelComm plain_shared = model_comm(config, b, s, 2, /*sp=*/false, DType::F32, shared);
  EXPECT_EQ(counts(plain_shared.layer.forward, 2), (Counts{{{CommPattern::AllReduce, activation}, 2}}));
  EXPECT_EQ(counts(plain_shared.layer.backward, 2), (Counts{{{CommPattern::AllReduce, activation}, 2}}));
}

// GPT-2's fused c_attn and its c_fc are one linear per value already: sharing changes nothing.
TEST(ModelComm, SharedInputLeavesGpt2AsItIs) {
  const ModelConfig config = testing::gpt2_config(4, 4, 32, 4099, 16);
  for (bool sp : {false, true}) {
    const ModelComm own = model_comm(config, 2, 16, 2, sp, DType::F32);
    const ModelComm shared = model_comm(config, 2, 16, 2, sp, DType::F32, TensorParallelInput::Shared);
    EXPECT_EQ(counts(shared.layer.forward, 2), counts(own.layer.forward, 2));
    EXPECT_EQ(counts(shared.layer.backward, 2), counts(own.layer.backward, 2));
    EXPECT_EQ(counts(shared.head.backward, 2), counts(own.head.backward, 2));
  }
}

}  // namespace
}  // namespace strata
