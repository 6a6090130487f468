#include "core/device.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/tensor.h"

namespace strata {

bool DeviceCapabilities::computes(DType dtype) const {
  return std::find(native_dtypes.begin(), native_dtypes.end(), dtype) != native_dtypes.end();
}

namespace {

// The host runs every call before returning, so an event is the moment it was recorded.
class HostEvent final : public DeviceEvent {
 public:
  HostEvent() : time_(std::chrono::steady_clock::now()) {}
  void wait() const override {}
  bool done() const override { return true; }
  double seconds_since(const DeviceEvent& earlier) const override {
    return std::chrono::duration<double>(time_ - static_cast<const HostEvent&>(earlier).time_).count();
  }

 private:
  std::chrono::steady_clock::time_point time_;
};

class HostDevice final : public Device {
 public:
  std::string name() const override { return "host"; }
  bool is_host() const override { return true; }
  DeviceCapabilities capabilities() const override {
    return {{DType::F64, DType::F32, DType::BF16, DType::F16}, SIZE_MAX, SIZE_MAX};
  }
  std::shared_ptr<Buffer> allocate(size_t bytes) const override { return Buffer::allocate(bytes); }
  void copy_to_host(const Buffer& source, size_t offset, void* target, size_t bytes) const override {
    if (bytes > 0) std::memmove(target, source.data() + offset, bytes);
  }
  void copy_from_host(const void* source, const Buffer& target, size_t offset, size_t bytes) const override {
    if (bytes > 0) std::memmove(target.data() + offset, source, bytes);
  }
  std::shared_ptr<DeviceEvent> copy_to_host_async(const Buffer& source, size_t offset, void* target,
                                                  size_t bytes) const override {
    copy_to_host(source, offset, target, bytes);
    return record();
  }
  void copy(const Buffer& source, size_t source_offset, const Buffer& target, size_t target_offset,
            size_t bytes) const override {
    if (bytes > 0) std::memmove(target.data() + target_offset, source.data() + source_offset, bytes);
  }
  void fill_zero(const Buffer& target, size_t offset, size_t bytes) const override {
    if (bytes > 0) std::memset(target.data() + offset, 0, bytes);
  }
  std::shared_ptr<DeviceEvent> record() const override { return std::make_shared<HostEvent>(); }
  void synchronize() const override {}
};

}  // namespace

const Device& host_device() {
  static const HostDevice device;
  return device;
}

}  // namespace strata
