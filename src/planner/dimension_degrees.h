#pragma once
// A value per planned parallel dimension, by name: a plan's degrees, or the degrees a user fixes or
// bounds. The planned dimensions are the runtime's registered ones (parallel/parallel_dimension.h) and
// those the planner prices for other runtimes only (context parallelism), which Strata's runtime does
// not execute. Held in a fixed-capacity array by position (the runtime's from the bottom, in
// registration order; the priced-only ones at the top), since the search copies plans by the tens of
// thousands; a dimension registered later needs no field of its own.
#include <array>
#include <compare>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class MeshShape;
struct ParallelDimension;

class DimensionDegrees {
 public:
  static constexpr size_t kCapacity = 8;

  // Every dimension at `unset` (1 for a plan's degrees; 0, "open", for limits).
  explicit DimensionDegrees(int unset = 1);

  // Fails naming an unregistered dimension.
  int operator[](std::string_view dimension) const;
  void set(std::string_view dimension, int value);
  // By registration position (dimension_position).
  int at(size_t position) const { return values_[position]; }
  void set_at(size_t position, int value) { values_[position] = value; }

  // The product over every registered dimension: the devices a plan's degrees use.
  int product() const;
  int least() const;  // over every registered dimension
  // The product of the batch-splitting dimensions' degrees (dp x ep): the replicas sharing a step's rows.
  int batch_replicas() const;
  // "dp=8 tp=8 pp=4" ("... pp=4 ep=2"): every dimension in registration order but one that
  // applies to some models only at 1 (ParallelDimension::named_when_set_only).
  std::string describe() const;

  auto operator<=>(const DimensionDegrees& other) const = default;

 private:
  std::array<int, kCapacity> values_;
};

// Seconds per registered dimension, by registration position as DimensionDegrees holds degrees: a
// step's time terms of each dimension (its communication, TimeBreakdown), with no field per dimension.
class DimensionSeconds {
 public:
  DimensionSeconds() { values_.fill(0.0); }
  // Fail naming an unregistered dimension.
  double operator[](std::string_view dimension) const;
  double& operator[](std::string_view dimension);
  double at(size_t position) const { return values_[position]; }
  double& at(size_t position) { return values_[position]; }

 private:
  std::array<double, DimensionDegrees::kCapacity> values_;
};

// Each dimension's options in a plan (tensor parallelism's sequence parallelism, pipeline parallelism's
// schedule and virtual stages): a few small integers per dimension, by registration position, each 0
// at the option's default. What they mean is the dimension's planner part's (plan_dimension.h), whose
// accessors alone read and write them; the planner copies and compares them without knowing which.
class DimensionOptionValues {
 public:
  static constexpr size_t kPerDimension = 2;

  // Every option at `unset` (0 in a plan; for limits, kOpen).
  explicit DimensionOptionValues(int unset = 0) { values_.fill(unset); }
  static constexpr int kOpen = -1;

  int at(size_t position, size_t option) const { return values_[position * kPerDimension + option]; }
  void set_at(size_t position, size_t option, int value) { values_[position * kPerDimension + option] = value; }
  // Every option of the dimension at `position` from `other`.
  void copy_dimension(size_t position, const DimensionOptionValues& other);

  auto operator<=>(const DimensionOptionValues& other) const = default;

 private:
  std::array<int, DimensionDegrees::kCapacity * kPerDimension> values_;
};

// A planned dimension and its position in the arrays above.
struct PlannedDimension {
  size_t position = 0;
  const ParallelDimension* dimension = nullptr;
};
// Every planned dimension: the runtime's registered ones in registration order, then the priced-only
// ones (priced_only_dimensions).
std::vector<PlannedDimension> planned_dimensions();
// The planned dimension at `position`.
const ParallelDimension& planned_dimension_at(size_t position);
// The dimensions the planner prices for other runtimes only, with their place in the device order
// (their nesting): Strata's runtime does not register or execute them (context_parallel_planning.cpp).
const std::vector<ParallelDimension>& priced_only_dimensions();

// The positions of the planned dimensions, innermost
// (lowest nesting, parallel/parallel_dimension.h) first: the device order, and the order a step's
// per-dimension terms are added in.
class InnermostFirst {
 public:
  InnermostFirst();
  const size_t* begin() const { return positions_.data(); }
  const size_t* end() const { return positions_.data() + count_; }

 private:
  std::array<size_t, DimensionDegrees::kCapacity> positions_{};
  size_t count_ = 0;
};

// A mesh's degrees.
DimensionDegrees degrees_of(const MeshShape& mesh);
// "dp x tp x pp x ep": every dimension the runtime registers, in registration order.
std::string degrees_product_name();
// The position of `dimension`; fails naming one neither registered nor priced, or one past the
// planner's capacity.
size_t dimension_position(std::string_view dimension);

}  // namespace strata
