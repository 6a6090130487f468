#include "train/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_train_config(toml, "job.toml", overrides);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

const char* kValid = R"(
[model]
n_layer = 2
n_head = 4
n_embd = 64
vocab_size = 512
block_size = 32
[train]
batch_size = 4
global_batch = 8
lr = 3e-4
lr_min = 3e-5
)";

TEST(TrainConfig, ReadsKeysAndOverrides) {
  TrainConfig config = parse_train_config(kValid, "job.toml", {"train.steps=7", "data.dir=some/where", "train.lr=1"});
  EXPECT_EQ(config.model.n_head, 4);
  EXPECT_EQ(config.model.block_size, 32);
  EXPECT_EQ(config.accumulation_steps(), 2);
  EXPECT_EQ(config.steps, 7);
  EXPECT_EQ(config.data_dir, "some/where");
  EXPECT_DOUBLE_EQ(config.lr, 1.0);  // an integer is accepted where a number is expected
}

TEST(TrainConfig, UnknownKeyIsNamed) {
  EXPECT_THAT(error_of(std::string(kValid) + "[optim]\nlearning_rate = 1\n"),
              HasSubstr("job.toml: unknown key 'optim' (expected one of: checkpoint, compare, data, model, ops, parallel, "
                        "precision, train)"));
  EXPECT_THAT(error_of(kValid, {"train.lrr=1"}),
              HasSubstr("--set: unknown key 'train.lrr' (expected one of: adam_eps, batch_size,"));
}

TEST(TrainConfig, WrongTypeIsNamed) {
  EXPECT_THAT(error_of(kValid, {"model.n_layer=\"two\""}),
              HasSubstr("--set: key 'model.n_layer' must be an integer, got a string"));
  EXPECT_THAT(error_of(kValid, {"train.lr=fast"}), HasSubstr("--set: key 'train.lr' must be a number, got a string"));
  EXPECT_THAT(error_of(kValid, {"checkpoint.resume=3"}),
              HasSubstr("--set: key 'checkpoint.resume' must be a boolean, got an integer"));
}

TEST(TrainConfig, OverrideReplacesTheFilesValue) {
  std::string text = std::string(kValid) + "[ops]\nthreads = \"many\"\n";
  EXPECT_THAT(error_of(text), HasSubstr("job.toml: key 'ops.threads' must be an integer, got a string"));
  EXPECT_EQ(parse_train_config(text, "job.toml", {"ops.threads=2"}).threads, 2);
}

TEST(TrainConfig, ImpossibleValuesNameTheKey) {
  EXPECT_THAT(error_of(kValid, {"model.n_head=5"}), HasSubstr("model.n_head"));
  EXPECT_THAT(error_of(kValid, {"train.batch_size=3"}), HasSubstr("train.batch_size"));
  EXPECT_THAT(error_of(kValid, {"train.lr_min=1"}), HasSubstr("train.lr_min"));
  EXPECT_THAT(error_of(kValid, {"train.beta2=1.0"}), HasSubstr("train.beta2"));
  EXPECT_THAT(error_of(kValid, {"ops.fallback=maybe"}), HasSubstr("ops.fallback"));
  EXPECT_THAT(error_of(kValid, {"ops.sum_order=reversed"}),
              HasSubstr("key 'ops.sum_order' must be \"natural\" or \"permuted\", got \"reversed\""));
  EXPECT_THAT(error_of(kValid, {"model.n_layer=0"}), HasSubstr("model.n_layer"));
  EXPECT_THAT(error_of(kValid, {"train.global_batch=-8"}), HasSubstr("train.global_batch"));
}

TEST(TrainConfig, MalformedTomlNamesTheFileAndLine) {
  EXPECT_THAT(error_of("[model]\nn_layer = = 2\n"), HasSubstr("job.toml:2"));
  EXPECT_THAT(error_of(kValid, {"novalue"}), HasSubstr("key=value"));
}

TEST(TrainConfig, SavedTomlReadsBackIdentically) {
  TrainConfig config = parse_train_config(kValid, "job.toml", {"model.init_from=/x/y.safetensors"});
  TrainConfig again = parse_train_config(to_toml(config), "saved.toml", {});
  EXPECT_EQ(to_toml(config), to_toml(again));
  EXPECT_EQ(again.init_from, "/x/y.safetensors");
  EXPECT_DOUBLE_EQ(again.lr_min, 3e-5);
}

// One spelling printed and saved (the dtype names of `strata ops`, cluster files and logs);
// the config spellings fp32/fp16 and PyTorch's names are read as the same precision.
TEST(TrainConfig, PrecisionIsReadInEverySpellingAndSavedInOne) {
  for (const auto& [written, saved] : std::vector<std::pair<std::string, std::string>>{
           {"fp32", "f32"}, {"f32", "f32"}, {"float32", "f32"}, {"bf16", "bf16"}, {"bfloat16", "bf16"},
           {"fp16", "f16"}, {"f16", "f16"}, {"float16", "f16"}}) {
    TrainConfig config = parse_train_config(kValid, "job.toml", {"precision.compute=" + written});
    EXPECT_EQ(config.precision, saved) << written;
    EXPECT_THAT(to_toml(config), HasSubstr("compute = '" + saved + "'")) << written;
  }
  EXPECT_EQ(parse_train_config(kValid, "job.toml", {}).precision, "f32");
  EXPECT_THAT(error_of(kValid, {"precision.compute=fp8"}),
              HasSubstr("key 'precision.compute' must be f32, bf16 or f16 (fp32 and fp16 are accepted too), got \"fp8\""));
  EXPECT_THAT(error_of(kValid, {"precision.compute=i32"}), HasSubstr("key 'precision.compute' must be f32"));
}

// The parallel.* keys are the dimensions' own (parallel/parallel_settings.h): read, checked and written
// back through each dimension's registration, with messages naming the key.
const std::string kParallel = std::string(kValid) + R"(
[parallel]
tp = 2
sp = true
pp = 2
schedule = "gpipe"
bucket_mb = 10
zero = 1
)";

TEST(ParallelKeys, EveryDimensionsKeysAreReadOverriddenAndWrittenBack) {
  const TrainConfig config = parse_train_config(kParallel, "job.toml", {"parallel.dp=3", "parallel.virtual_stages=1"});
  EXPECT_EQ(config.dp, 3);
  EXPECT_DOUBLE_EQ(config.bucket_mb, 10);
  EXPECT_EQ(config.zero, 1);
  EXPECT_EQ(config.tp, 2);
  EXPECT_TRUE(config.sp);
  EXPECT_EQ(config.pp, 2);
  EXPECT_EQ(config.schedule, "gpipe");
  EXPECT_EQ(config.virtual_stages, 1);
  EXPECT_EQ(config.ep, 1);  // the default of a key not given
  const std::string saved = to_toml(config);
  for (const char* line : {"dp = 3", "bucket_mb = 10", "zero = 1", "tp = 2", "sp = true", "pp = 2",
                           "schedule = 'gpipe'", "virtual_stages = 1", "ep = 1"}) {
    EXPECT_THAT(saved, HasSubstr(line));
  }
  EXPECT_EQ(to_toml(parse_train_config(saved, "saved.toml", {})), saved);
}

TEST(ParallelKeys, TheDegreesMakeTheMesh) {
  const TrainConfig config = parse_train_config(kParallel, "job.toml", {});
  EXPECT_EQ(config.mesh().size(), 4);  // parallel.dp = 0 counted as 1
  const MeshShape job = config.mesh_for(8);
  EXPECT_EQ(job.degree("dp"), 2);  // the ranks tp · pp leave
  EXPECT_EQ(job.degree("tp"), 2);
  EXPECT_EQ(job.degree("pp"), 2);
  EXPECT_EQ(job.degree("ep"), 1);
}

// A layout the ranks launched cannot make is named by its keys: the experts' only when set, and the data-parallel
// degree, which takes the ranks the others leave, on its own.
TEST(ParallelKeys, DegreesTheRanksCannotMakeAreNamedByTheirKeys) {
  auto mesh_error = [](int64_t dp, int64_t tp, int64_t pp, int64_t ep, int ranks) {
    ParallelSettings settings;
    settings.dp = dp;
    settings.tp = tp;
    settings.pp = pp;
    settings.ep = ep;
    try {
      settings.mesh_for(ranks);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(mesh_error(0, 2, 2, 1, 6),
              HasSubstr("keys 'parallel.tp' (2) and 'parallel.pp' (2): their product must divide the 6 ranks launched"));
  EXPECT_THAT(mesh_error(0, 2, 1, 2, 6), HasSubstr("keys 'parallel.tp' (2), 'parallel.pp' (1) and 'parallel.ep' (2): "
                                                   "their product must divide the 6 ranks launched"));
  EXPECT_THAT(mesh_error(3, 1, 1, 1, 4),
              HasSubstr("key 'parallel.dp' is 3 but the job has 4 ranks: the other parallel.* degrees leave 4"));
  EXPECT_THAT(mesh_error(1, 1, 1, 2, 4),
              HasSubstr("key 'parallel.dp' is 1 but the job has 4 ranks: the other parallel.* degrees leave 2"));
  EXPECT_EQ(mesh_error(2, 1, 1, 2, 4), "no error");
}

TEST(ParallelKeys, EachDimensionsChecksNameItsKey) {
  EXPECT_THAT(error_of(kParallel, {"parallel.tp=\"two\""}),
              HasSubstr("--set: key 'parallel.tp' must be an integer, got a string"));
  EXPECT_THAT(error_of(kParallel, {"parallel.dp=-1"}), HasSubstr("job.toml: key 'parallel.dp' must be at least 0, got -1"));
  EXPECT_THAT(error_of(kParallel, {"parallel.bucket_mb=0"}), HasSubstr("key 'parallel.bucket_mb' must be positive, got 0"));
  EXPECT_THAT(error_of(kParallel, {"parallel.zero=3"}), HasSubstr("key 'parallel.zero' must be 0, 1 or 2, got 3"));
  EXPECT_THAT(error_of(kParallel, {"parallel.tp=3"}), HasSubstr("key 'parallel.tp' (3) must divide model.n_head (4)"));
  EXPECT_THAT(error_of(kParallel, {"parallel.tp=1"}), HasSubstr("key 'parallel.sp' needs parallel.tp > 1"));
  EXPECT_THAT(error_of(kParallel, {"parallel.pp=3"}), HasSubstr("key 'parallel.pp' (3) exceeds model.n_layer (2)"));
  EXPECT_THAT(error_of(kParallel, {"parallel.schedule=zb"}),
              HasSubstr("key 'parallel.schedule': pipeline schedule must be gpipe, 1f1b or interleaved, got 'zb'"));
  EXPECT_THAT(error_of(kParallel, {"parallel.ep=2"}), HasSubstr("key 'parallel.ep' (2) needs a mixture-of-experts model"));
}

}  // namespace
}  // namespace strata
