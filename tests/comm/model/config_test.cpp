// Pins and environment settings.
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>

#include "comm/config.h"
#include "core/error.h"

namespace strata::comm {
namespace {

TEST(Config, OneAlgorithmPinsEveryCollectiveItImplements) {
  CommConfig config;
  config.pin("recursive_doubling", "STRATA_COMM_ALGO");
  EXPECT_EQ(config.pinned_for(Collective::AllReduce), Algorithm::RecursiveDoubling);
  EXPECT_EQ(config.pinned_for(Collective::AllGather), Algorithm::RecursiveDoubling);
  EXPECT_EQ(config.pinned_for(Collective::Broadcast), Algorithm::Auto);
  EXPECT_EQ(config.pinned_for(Collective::ReduceScatter), Algorithm::Auto);
  EXPECT_EQ(config.pinned_by, "STRATA_COMM_ALGO");
}

TEST(Config, PinsPerCollective) {
  CommConfig config;
  config.pin(" all_reduce = hierarchical , broadcast=binomial", "train.toml comm.algorithms");
  EXPECT_EQ(config.pinned_for(Collective::AllReduce), Algorithm::Hierarchical);
  EXPECT_EQ(config.pinned_for(Collective::Broadcast), Algorithm::BinomialTree);
  EXPECT_EQ(config.pinned_for(Collective::AllGather), Algorithm::Auto);
}

TEST(Config, BadPinsNameTheSetting) {
  CommConfig config;
  for (const char* spec : {"rings", "all_reduce=fast", "allreduce=ring", "all_reduce"}) {
    try {
      config.pin(spec, "STRATA_COMM_ALGO");
      ADD_FAILURE() << "accepted " << spec;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("STRATA_COMM_ALGO"), std::string::npos) << error.what();
    }
  }
}

TEST(Config, EnvironmentOverridesAndIsChecked) {
  setenv("STRATA_COMM_TIMEOUT", "7.5", 1);
  setenv("STRATA_COMM_DEBUG", "1", 1);
  setenv("STRATA_COMM_CHUNK_BYTES", "4096", 1);
  setenv("STRATA_COMM_STAGING_BYTES", "0", 1);
  CommConfig config = CommConfig::from_environment();
  EXPECT_EQ(config.timeout_s, 7.5);
  EXPECT_EQ(config.call_check, CallCheck::Before);
  EXPECT_EQ(config.chunk_bytes, 4096u);
  EXPECT_EQ(config.exchange_staging_bytes, 0u);
  EXPECT_EQ(CommConfig{}.exchange_staging_bytes, kDefaultStagingBytes);
  setenv("STRATA_COMM_STAGING_BYTES", "-1", 1);
  EXPECT_THROW(CommConfig::from_environment(), Error);
  unsetenv("STRATA_COMM_STAGING_BYTES");
  setenv("STRATA_COMM_TIMEOUT", "soon", 1);
  EXPECT_THROW(CommConfig::from_environment(), Error);
  setenv("STRATA_COMM_TIMEOUT", "-1", 1);
  EXPECT_THROW(CommConfig::from_environment(), Error);
  unsetenv("STRATA_COMM_TIMEOUT");
  unsetenv("STRATA_COMM_DEBUG");
  unsetenv("STRATA_COMM_CHUNK_BYTES");
}

// The all-to-all's staging limit is unlimited unless set; the variable sets it, 0 included.
TEST(Config, AllToAllStagingLimitComesFromTheEnvironmentWhenSet) {
  const size_t unlimited = std::numeric_limits<size_t>::max();
  EXPECT_EQ(CommConfig{}.all_to_all_staging_bytes, unlimited);
  unsetenv("STRATA_COMM_ALL_TO_ALL_STAGING_BYTES");
  EXPECT_EQ(CommConfig::from_environment().all_to_all_staging_bytes, unlimited);
  setenv("STRATA_COMM_ALL_TO_ALL_STAGING_BYTES", "4194304", 1);
  EXPECT_EQ(CommConfig::from_environment().all_to_all_staging_bytes, size_t{4194304});
  setenv("STRATA_COMM_ALL_TO_ALL_STAGING_BYTES", "0", 1);
  EXPECT_EQ(CommConfig::from_environment().all_to_all_staging_bytes, size_t{0});
  for (const char* bad : {"-5", "lots", "4M"}) {
    setenv("STRATA_COMM_ALL_TO_ALL_STAGING_BYTES", bad, 1);
    try {
      CommConfig::from_environment();
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("STRATA_COMM_ALL_TO_ALL_STAGING_BYTES"), std::string::npos) << error.what();
    }
  }
  unsetenv("STRATA_COMM_ALL_TO_ALL_STAGING_BYTES");
}

TEST(Config, CallsAreCheckedOverlappedByDefaultAndTheCheckCanBeSwitched) {
  EXPECT_EQ(CommConfig{}.call_check, CallCheck::Overlapped);
  setenv("STRATA_COMM_CHECK", "off", 1);
  EXPECT_EQ(CommConfig::from_environment().call_check, CallCheck::Off);
  setenv("STRATA_COMM_CHECK", "before", 1);
  EXPECT_EQ(CommConfig::from_environment().call_check, CallCheck::Before);
  setenv("STRATA_COMM_CHECK", "sometimes", 1);
  try {
    CommConfig::from_environment();
    ADD_FAILURE() << "accepted STRATA_COMM_CHECK=sometimes";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("STRATA_COMM_CHECK='sometimes' must be overlapped, before or off"),
              std::string::npos)
        << error.what();
  }
  unsetenv("STRATA_COMM_CHECK");
}

}  // namespace
}  // namespace strata::comm
