// The device seam on an OpenCL device: tensors that live there are reached only through copies,
// programs are built once and then loaded from the disk cache, and an op the device lacks runs
// on the host through counted transfers.
#include <gtest/gtest.h>

#include "backends/opencl/opencl_device.h"
#include "backends/opencl/opencl_kernels.h"
#include "core/file_io.h"
#include "cpu_test_util.h"

namespace strata::testing {
namespace {

const Device& opencl_device() { return get_backend("opencl").device(); }

TEST(OpenCLDevice, TensorsRoundTripThroughCopiesAndRefuseHostAccess) {
  const Tensor host = random_f32({3, 1000}, 1);
  const Tensor on_device = host.to_device(opencl_device());
  EXPECT_FALSE(on_device.on_host());
  EXPECT_EQ(&on_device.device(), &opencl_device());
  EXPECT_THROW(on_device.data<float>(), Error);
  EXPECT_THROW(on_device.item(), Error);

  Tensor copy = Tensor::empty(host.shape(), DType::F32, opencl_device());
  copy.copy_from(on_device);  // device to device
  expect_identical(copy.to_host(), host, "device copy");
  // A view into the middle of a device buffer copies only its own bytes.
  Tensor row = Tensor::zeros({1000}, DType::F32, opencl_device());
  row.copy_from(on_device.narrow(0, 1, 1).reshape({1000}));
  expect_identical(row.to_host(), host.narrow(0, 1, 1).reshape({1000}).clone(), "narrowed copy");
  copy.fill_zero();
  EXPECT_EQ(copy.to_host().data<float>()[2999], 0.0f);
}

TEST(OpenCLDevice, AQueuedReadLandsWhenItsEventIsDoneAndAfterTheWorkBeforeIt) {
  const Tensor host = random_f32({1 << 16}, 6);
  Tensor on_device = Tensor::zeros(host.shape(), DType::F32, opencl_device());
  on_device.copy_from(host);
  // Queued work before the read (a scale by two) is in the bytes the read delivers.
  Dispatcher dispatcher(get_backend("opencl"), get_backend("ref"), FallbackPolicy::Error);
  dispatcher.run("scale", {on_device}, {on_device}, {{"factor", 2.0}});
  Tensor landed = Tensor::empty(host.shape(), DType::F32);
  const auto read = opencl_device().copy_to_host_async(on_device.buffer(), on_device.offset_bytes(), landed.raw(),
                                                       on_device.nbytes());
  read->wait();
  EXPECT_TRUE(read->done());
  for (int64_t i = 0; i < host.numel(); i += 997) EXPECT_EQ(landed.data<float>()[i], 2.0f * host.data<float>()[i]) << i;
}

TEST(OpenCLDevice, ReportsItsCapabilities) {
  const DeviceCapabilities capabilities = opencl_device().capabilities();
  EXPECT_TRUE(capabilities.computes(DType::F32));
  EXPECT_FALSE(capabilities.computes(DType::BF16));  // OpenCL C has no bf16 arithmetic
  EXPECT_GT(capabilities.max_allocation, 0u);
  EXPECT_GE(capabilities.memory_bytes, capabilities.max_allocation);
  EXPECT_THROW(opencl_device().allocate(capabilities.max_allocation + 1), Error);
}

TEST(OpenCLDevice, ChoosesDevicesByIndexOrNameAndNamesWhatItFound) {
  const std::vector<opencl::DeviceInfo> devices = opencl::list_devices();
  ASSERT_FALSE(devices.empty());
  EXPECT_EQ(&opencl::open_device("0"), &opencl::open_device(""));
  EXPECT_EQ(&opencl::open_device(devices.front().name.substr(0, 4)), &opencl::open_device("0"));
  try {
    opencl::open_device("no such accelerator");
    FAIL() << "an unknown device name was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no such accelerator"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(devices.front().name), std::string::npos) << error.what();
  }
  EXPECT_THROW(opencl::open_device(std::to_string(devices.size())), Error);
  EXPECT_THROW(get_backend("cpu", "0"), Error);  // host backends have no device to choose
}

TEST(OpenCLDevice, ASecondStartLoadsProgramsFromTheDiskCache) {
  TemporaryDirectory cache("strata-opencl-cache");
  const opencl::DeviceInfo info = opencl::list_devices().front();
  const std::string source = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }";
  {
    opencl::OpenCLDevice first(info, cache.path());
    first.kernel(source, "twice");
    first.kernel(source, "twice");
    EXPECT_EQ(first.programs_compiled(), 1);
    EXPECT_EQ(first.programs_loaded(), 0);
  }
  opencl::OpenCLDevice second(info, cache.path());
  second.kernel(source, "twice");
  EXPECT_EQ(second.programs_compiled(), 0);
  EXPECT_EQ(second.programs_loaded(), 1);
  // A changed source is another program.
  second.kernel(source + "\n", "twice");
  EXPECT_EQ(second.programs_compiled(), 1);
}

TEST(OpenCLDevice, ABrokenProgramIsAnErrorWithTheCompilersLog) {
  TemporaryDirectory cache("strata-opencl-cache");
  opencl::OpenCLDevice device(opencl::list_devices().front(), cache.path());
  try {
    device.kernel("__kernel void broken(__global float* x) { x[0] = undeclared; }", "broken");
    FAIL() << "a program that does not compile was built";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("undeclared"), std::string::npos) << error.what();
  }
}

// The opencl backend without its matmul kernel, as a device that lacks one op would be.
const Backend& opencl_without_matmul() {
  static const Backend* backend = [] {
    auto made = std::make_unique<Backend>("opencl-without-matmul", opencl_device());
    register_opencl_kernels(*made);
    made->remove_kernel("matmul", DType::F32);
    const Backend* kept = made.get();
    register_backend(std::move(made));
    return kept;
  }();
  return *backend;
}

TEST(OpenCLDevice, AnOpTheDeviceLacksRunsOnTheHostThroughCountedTransfers) {
  Dispatcher dispatcher(opencl_without_matmul(), get_backend("ref"), FallbackPolicy::Allow);
  const Tensor a = random_f32({5, 7}, 2), b = random_f32({7, 3}, 3);
  const Attrs attrs = {{"trans_a", false}, {"trans_b", false}};
  const Tensors out = dispatcher.call("matmul", {a.to_device(opencl_device()), b.to_device(opencl_device())}, attrs);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].on_host());
  expect_close(out[0].to_host(), run_on("ref", "matmul", {a, b}, attrs)[0], 0.0, "matmul through ref");

  const TransferTotals totals = dispatcher.transfer_totals();
  EXPECT_EQ(totals.count, 3);  // a and b to the host, the product back
  EXPECT_EQ(totals.bytes, static_cast<int64_t>((5 * 7 + 7 * 3 + 5 * 3) * sizeof(float)));
  const std::vector<TransferRecord> records = dispatcher.transfers();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].op, "matmul");
  EXPECT_NE(dispatcher.summary().find("to host"), std::string::npos) << dispatcher.summary();
  ASSERT_EQ(dispatcher.records().size(), 1u);
  EXPECT_EQ(dispatcher.records()[0].route, Route::Reference);
}

TEST(OpenCLDevice, NativeOpsMoveNothing) {
  Dispatcher dispatcher(get_backend("opencl"), get_backend("ref"), FallbackPolicy::Error);
  dispatcher.call("matmul", {random_f32({4, 4}, 4).to_device(opencl_device()), random_f32({4, 4}, 5).to_device(opencl_device())},
                  {{"trans_a", false}, {"trans_b", false}});
  EXPECT_EQ(dispatcher.transfer_totals().count, 0);
  EXPECT_EQ(dispatcher.summary(), "");
}

}  // namespace
}  // namespace strata::testing
