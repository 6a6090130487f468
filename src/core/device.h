#pragma once
// A device is where a buffer's bytes live and where kernels run on them: the host, or an
// accelerator with a memory of its own (OpenCL today; backends/README.md maps CUDA and Ascend
// onto the same calls). Work for an accelerator goes into its one in-order queue and runs
// asynchronously: a call returns once the work is submitted, and the queue's order is the only
// order. Host code never dereferences device memory; it copies, through these calls.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata {

class Buffer;

struct DeviceCapabilities {
  std::vector<DType> native_dtypes;  // floating dtypes the device computes in its own arithmetic
  size_t max_allocation = 0;         // the largest single buffer, bytes
  size_t memory_bytes = 0;           // the device's memory, bytes
  bool computes(DType dtype) const;
};

// A point in a device's queue, complete when everything submitted before it is.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual void wait() const = 0;
  virtual bool done() const = 0;  // without waiting
  // Seconds from `earlier` (of the same device) to this, by the device's own clock; waits for both.
  virtual double seconds_since(const DeviceEvent& earlier) const = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "host", "opencl:0 pthread-skylake-avx512"
  virtual bool is_host() const { return false; }
  virtual DeviceCapabilities capabilities() const = 0;

  virtual std::shared_ptr<Buffer> allocate(size_t bytes) const = 0;  // uninitialised
  // Copies between a buffer of this device and host memory. Both return when the host memory
  // may be reused (a read has landed, a write has been taken).
  virtual void copy_to_host(const Buffer& source, size_t offset, void* target, size_t bytes) const = 0;
  virtual void copy_from_host(const void* source, const Buffer& target, size_t offset, size_t bytes) const = 0;
  // A read queued behind the work before it: `target` receives the bytes when the returned event is
  // done, and must stay valid and untouched until then (a gradient bucket read while backward goes on).
  virtual std::shared_ptr<DeviceEvent> copy_to_host_async(const Buffer& source, size_t offset, void* target,
                                                          size_t bytes) const = 0;
  // Within this device's memory, queued (regions may not overlap).
  virtual void copy(const Buffer& source, size_t source_offset, const Buffer& target, size_t target_offset,
                    size_t bytes) const = 0;
  virtual void fill_zero(const Buffer& target, size_t offset, size_t bytes) const = 0;

  virtual std::shared_ptr<DeviceEvent> record() const = 0;  // an event after all work submitted so far
  virtual void synchronize() const = 0;                      // returns when the queue is empty
};

// The host: its buffers are plain memory, its queue runs each call before returning.
const Device& host_device();

}  // namespace strata
