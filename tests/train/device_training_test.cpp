// Training on a device backend (opencl, on PoCL here): the job keeps its parameters, gradients,
// optimizer state and activations on the device and moves only the batch, the loss and the
// norm's words; it follows the cpu's trajectory within f32 tolerances, resumes across backends,
// and an op the device lacks falls back to the host through transfers that are counted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "backends/opencl/opencl_kernels.h"
#include "core/file_io.h"
#include "tiny_training_test.h"
#include "train/trainer.h"

namespace strata {
namespace {

using DeviceTrainingTest = testing::TinyTrainingTest;
using ::testing::HasSubstr;

std::vector<double> losses(Trainer& trainer, int steps) {
  std::vector<double> result;
  for (int i = 0; i < steps; ++i) result.push_back(trainer.step().loss);
  return result;
}

// Six f32 steps of the tiny model: kernels that sum in another order (CLBlast's GEMMs) move the
// loss by rounding only, far below 1e-4 of it.
void expect_same_trajectory(const std::vector<double>& expected, const std::vector<double>& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-4 * expected[i]) << "step " << i + 1;
}

TEST_F(DeviceTrainingTest, OpenCLFollowsTheCpuTrajectoryDeterministicallyWithoutTransfers) {
  Trainer cpu(config("cpu"));
  Trainer opencl(config("opencl", {"ops.backend=opencl"}));
  Trainer again(config("opencl_again", {"ops.backend=opencl"}));
  EXPECT_FALSE(opencl.device().is_host());
  const std::vector<double> on_device = losses(opencl, 6);
  expect_same_trajectory(losses(cpu, 6), on_device);
  EXPECT_EQ(losses(again, 6), on_device) << "the same config and seed give the same bits on the device";
  EXPECT_NEAR(opencl.validation_loss(), cpu.validation_loss(), 1e-4 * cpu.validation_loss());
  EXPECT_EQ(opencl.dispatcher().transfer_totals().count, 0);
  EXPECT_TRUE(opencl.dispatcher().records().empty()) << opencl.dispatcher().summary();
}

TEST_F(DeviceTrainingTest, LlamaTrainsOnOpenCLAsOnTheCpu) {
  const std::vector<std::string> llama{"model.family=llama", "model.n_kv_head=1", "model.intermediate_size=48",
                                       "model.tie_word_embeddings=false"};
  std::vector<std::string> on_device = llama;
  on_device.push_back("ops.backend=opencl");
  Trainer cpu(config("llama_cpu", llama));
  Trainer opencl(config("llama_opencl", on_device));
  expect_same_trajectory(losses(cpu, 4), losses(opencl, 4));
  EXPECT_EQ(opencl.dispatcher().transfer_totals().count, 0);
}

TEST_F(DeviceTrainingTest, ACheckpointMovesBetweenTheDeviceAndTheHost) {
  Trainer straight(config("straight"));
  const std::vector<double> expected = losses(straight, 6);
  for (auto [first, second] : {std::pair{"opencl", "cpu"}, {"cpu", "opencl"}}) {
    const std::string run = std::string("from_") + first;
    {
      Trainer interrupted(config(run, {std::string("ops.backend=") + first}));
      losses(interrupted, 3);
      interrupted.save_checkpoint();
    }
    Trainer resumed(config(run, {std::string("ops.backend=") + second}));
    EXPECT_EQ(resumed.completed_steps(), 3);
    expect_same_trajectory(std::vector<double>(expected.begin() + 3, expected.end()), losses(resumed, 3));
  }
}

// The opencl backend without its gelu kernel, as a device that lacks one op would be.
void register_opencl_without_gelu() {
  static const bool registered = [] {
    auto backend = std::make_unique<Backend>("opencl-without-gelu", get_backend("opencl").device());
    register_opencl_kernels(*backend);
    backend->remove_kernel("gelu", DType::F32);
    register_backend(std::move(backend));
    return true;
  }();
  (void)registered;
}

TEST_F(DeviceTrainingTest, AMissingKernelRunsOnTheHostWithItsTransfersCountedAndReported) {
  register_opencl_without_gelu();
  Trainer complete(config("complete", {"ops.backend=opencl"}));
  Trainer lacking(config("lacking", {"ops.backend=opencl-without-gelu", "ops.fallback=allow"}));
  expect_same_trajectory(losses(complete, 3), losses(lacking, 3));
  // Each micro-batch's two layers run gelu once: its input to the host, its output back.
  const TransferTotals totals = lacking.dispatcher().transfer_totals();
  EXPECT_EQ(totals.count, 3 * 2 * 2 * 2);
  const int64_t gelu_bytes = 2 * 16 * 4 * 32 * sizeof(float);  // [batch, block, 4 x width]
  EXPECT_EQ(totals.bytes, totals.count * gelu_bytes);
  EXPECT_GT(totals.seconds, 0.0);
  const std::string summary = lacking.dispatcher().summary();
  EXPECT_THAT(summary, HasSubstr("gelu"));
  EXPECT_THAT(summary, HasSubstr("to host"));
  EXPECT_THAT(summary, HasSubstr("to device"));

  // A whole run records them per step in ops.json (no validation here: the eval graph moves gelu too).
  Trainer run(config("lacking_run", {"ops.backend=opencl-without-gelu", "ops.fallback=allow", "train.val_every=0"}));
  run.run();
  const nlohmann::json record = nlohmann::json::parse(read_text_file(root() / "lacking_run" / "ops.json"));
  const nlohmann::json& per_step = record.at("transfers_per_step");
  EXPECT_EQ(per_step.at("steps"), 6);
  EXPECT_DOUBLE_EQ(per_step.at("tensors").get<double>(), 2 * 2 * 2);
  EXPECT_DOUBLE_EQ(per_step.at("bytes").get<double>(), 2 * 2 * 2 * gelu_bytes);
  EXPECT_EQ(record.at("transfers").size(), 2u);  // gelu to the host, and back
}

TEST_F(DeviceTrainingTest, ALowPrecisionTheDeviceLacksIsAnErrorUnlessEmulationIsAllowed) {
  try {
    Trainer refused(config("bf16_refused", {"ops.backend=opencl", "precision.compute=bf16"}));
    FAIL() << "bf16 on a device without bf16 arithmetic started";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("precision.compute = \"bf16\""));
    EXPECT_THAT(error.what(), HasSubstr(get_backend("opencl").device().name()));
    EXPECT_THAT(error.what(), HasSubstr("ops.emulate"));
  }
  Trainer emulated(config("bf16_emulated", {"ops.backend=opencl", "precision.compute=bf16", "ops.emulate=true"}));
  Trainer cpu(config("bf16_cpu", {"precision.compute=bf16"}));
  const std::vector<double> expected = losses(cpu, 3), actual = losses(emulated, 3);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-2 * expected[i]);  // bf16 rounding
  bool reported = false;
  for (const FallbackRecord& record : emulated.dispatcher().records()) reported |= record.route == Route::Emulated;
  EXPECT_TRUE(reported) << "emulated kernels are reported as such";
  EXPECT_EQ(emulated.dispatcher().transfer_totals().count, 0);
}

}  // namespace
}  // namespace strata
