#pragma once
// A model's parameters: named fp32 master tensors in a fixed order, with the
// HuggingFace names, so they map one to one onto safetensors files.
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace strata {

enum class Init { Normal, Zeros, Ones };

struct ParamSpec {
  std::string name;
  Shape shape;
  Init init = Init::Normal;
  float stddev = 0.0f;  // for Init::Normal
  bool decay = false;   // AdamW weight decay applies (tensors of 2 or more dims)
};

class ParameterSet {
 public:
  ParameterSet() = default;
  // Allocates on `device`, uninitialised.
  explicit ParameterSet(std::vector<ParamSpec> specs, const Device& device = host_device());

  void initialise(const CounterRng& rng);  // each tensor from its own stream, by name (made on the host)
  // Every tensor's values from `source` (the same specs, on any device).
  void copy_from(const ParameterSet& source);
  // One tensor of `spec`'s shape, as initialise() fills it.
  static void initialise_tensor(const ParamSpec& spec, Tensor& tensor, const CounterRng& rng);
  size_t size() const { return specs_.size(); }
  const ParamSpec& spec(size_t index) const { return specs_.at(index); }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  Tensor& tensor(size_t index) { return tensors_.at(index); }
  const Tensor& tensor(size_t index) const { return tensors_.at(index); }
  const Tensor& get(const std::string& name) const;  // throws naming the tensor
  int64_t count() const;                              // number of scalars

 private:
  std::vector<ParamSpec> specs_;
  std::vector<Tensor> tensors_;
};

}  // namespace strata
