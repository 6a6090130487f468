#pragma once
// Chooses how each op runs on a backend: its own kernel, else the op's
// decomposition into other ops, else the `ref` backend's kernel. Every
// decomposition and fallback is counted, per (op, dtype, shape), so that a
// migration never silently runs on slow or different code. A fallback to `ref`
// from a backend whose device is not the host moves the op's inputs to the host
// and its outputs back: each such transfer is counted (bytes, time) and traced.
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <optional>
#include <string>
#include <tuple>

#include "ops/backend.h"

namespace strata {

enum class FallbackPolicy { Allow, Warn, Error };
FallbackPolicy parse_fallback_policy(const std::string& text);  // "allow" | "warn" | "error"

// Emulated: the backend's own kernel computes the dtype in a wider one.
enum class Route { Native, Emulated, Decomposed, Reference };
std::string_view route_name(Route route);

struct KernelChoice {
  const OpSchema* schema = nullptr;
  Route route = Route::Native;
  const KernelFn* kernel = nullptr;  // unset for Route::Decomposed
  DType dtype = DType::F32;
};

struct FallbackRecord {
  std::string op;
  DType dtype;
  std::string shape;  // shape of the dtype-selecting input
  Route route;
  int64_t count;
};

// Copies between the backend's device and the host that an op's route needed.
enum class TransferDirection { ToHost, ToDevice };
std::string_view transfer_direction_name(TransferDirection direction);  // "to host", "to device"

struct TransferRecord {
  std::string op;  // the op whose route needed them
  DType dtype;
  TransferDirection direction;
  int64_t count;   // tensors copied
  int64_t bytes;
  double seconds;  // the copies themselves, after the device's queue drained
};

struct TransferTotals {
  int64_t count = 0;
  int64_t bytes = 0;
  double seconds = 0;
};
TransferTotals total_of(const std::vector<TransferRecord>& records);
// What one run of an op on `route` copies between `device` and the host (no time): a ref fallback
// on a device moves each input to the host and each output back; every other route moves nothing.
TransferTotals copies_of_route(Route route, const Device& device, const Metas& inputs, const Metas& outputs);

class Dispatcher {
 public:
  // `reference` is the backend of last resort (normally `ref`).
  Dispatcher(const Backend& primary, const Backend& reference, FallbackPolicy policy);

  const Backend& backend() const { return primary_; }

  // Decides the route for (op, dtype); throws under FallbackPolicy::Error
  // when the route is not native, and warns once per (op, dtype) under Warn.
  KernelChoice resolve(const std::string& op, DType dtype);
  // The route resolve would take, or nullopt when it finds none (reports ask without failing).
  std::optional<Route> route_if_any(const std::string& op, DType dtype);

  // Runs a resolved op; outputs are preallocated. Counts non-native runs.
  void execute(const KernelChoice& choice, const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);

  // Eager conveniences: resolve and run; `call` allocates the outputs.
  void run(const std::string& op, const Tensors& inputs, const Tensors& outputs, const Attrs& attrs = {});
  Tensors call(const std::string& op, const Tensors& inputs, const Attrs& attrs = {});

  std::vector<FallbackRecord> records() const;
  std::vector<TransferRecord> transfers() const;
  TransferTotals transfer_totals() const;
  std::string summary() const;  // human-readable tables, empty when all native and nothing moved

 private:
  DType selecting_dtype(const OpSchema& schema, const Tensors& inputs) const;
  // Runs `kernel`, a host kernel, on the host copies of tensors that live on the backend's device.
  void run_on_host(const KernelChoice& choice, const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
  void copy_counted(const Tensor& source, const Tensor& target, const KernelChoice& choice, TransferDirection direction);
  std::string fallback_table(const std::vector<FallbackRecord>& all) const;

  const Backend& primary_;
  const Backend& reference_;
  FallbackPolicy policy_;
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, DType, std::string, Route>, int64_t> counts_;
  std::set<std::pair<std::string, DType>> warned_;
  std::map<std::tuple<std::string, DType, TransferDirection>, TransferRecord> transfers_;
};

}  // namespace strata
