#include "model/parameters.h"

#include <algorithm>

namespace strata {

ParameterSet::ParameterSet(std::vector<ParamSpec> specs, const Device& device) : specs_(std::move(specs)) {
  for (const ParamSpec& spec : specs_) tensors_.push_back(Tensor::empty(spec.shape, DType::F32, device));
}

void ParameterSet::initialise(const CounterRng& rng) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (tensors_[i].on_host()) {
      initialise_tensor(specs_[i], tensors_[i], rng);
      continue;
    }
    Tensor made = Tensor::empty(specs_[i].shape, DType::F32);
    initialise_tensor(specs_[i], made, rng);
    tensors_[i].copy_from(made);
  }
}

void ParameterSet::copy_from(const ParameterSet& source) {
  STRATA_CHECK(source.size() == size(), "{} parameters copied into {}", source.size(), size());
  for (size_t i = 0; i < tensors_.size(); ++i) tensors_[i].copy_from(source.tensor(i));
}

void ParameterSet::initialise_tensor(const ParamSpec& spec, Tensor& tensor, const CounterRng& rng) {
  STRATA_CHECK(tensor.shape() == spec.shape, "parameter '{}' is {}, initialised as {}", spec.name,
               shape_str(tensor.shape()), shape_str(spec.shape));
  float* data = tensor.data<float>();
  int64_t count = tensor.numel();
  switch (spec.init) {
    case Init::Normal: fill_normal(data, count, rng, stream_id(spec.name), 0.0f, spec.stddev); break;
    case Init::Zeros: std::fill(data, data + count, 0.0f); break;
    case Init::Ones: std::fill(data, data + count, 1.0f); break;
  }
}

const Tensor& ParameterSet::get(const std::string& name) const {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].name == name) return tensors_[i];
  }
  fail("model has no parameter named '{}'", name);
}

int64_t ParameterSet::count() const {
  int64_t total = 0;
  for (const Tensor& tensor : tensors_) total += tensor.numel();
  return total;
}

}  // namespace strata
