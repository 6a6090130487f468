#include "train/optimizer.h"

#include <cmath>

namespace strata {

namespace {

// Elements [range.begin, +length) of a parameter-shaped tensor, flat.
Tensor slice(const Tensor& tensor, const ParameterRange& range) {
  return tensor.reshape({tensor.numel()}).narrow(0, range.begin, range.length);
}

}  // namespace

AdamW::AdamW(const ParameterSet& params, AdamWSettings settings, std::vector<ParameterRange> ranges)
    : settings_(settings), ranges_(std::move(ranges)) {
  for (const ParameterRange& range : ranges_) {
    STRATA_CHECK(range.parameter < params.size() && range.begin >= 0 &&
                     range.begin + range.length <= params.tensor(range.parameter).numel(),
                 "optimizer range outside parameter {}", range.parameter);
    const Device& device = params.tensor(range.parameter).device();  // the moments live beside the parameters
    m_.push_back(Tensor::zeros({range.length}, DType::F32, device));
    v_.push_back(Tensor::zeros({range.length}, DType::F32, device));
  }
}

void AdamW::update(ParameterSet& params, const std::vector<Tensor>& grads, double lr, int64_t step,
                   double grad_scale, Dispatcher& dispatcher) {
  STRATA_CHECK(grads.size() == ranges_.size(), "{} gradients for {} optimizer ranges", grads.size(), ranges_.size());
  for (size_t r = 0; r < ranges_.size(); ++r) {
    const ParameterRange& range = ranges_[r];
    Attrs attrs{{"lr", lr},
                {"beta1", settings_.beta1},
                {"beta2", settings_.beta2},
                {"eps", settings_.eps},
                {"weight_decay", params.spec(range.parameter).decay ? settings_.weight_decay : 0.0},
                {"step", step},
                {"grad_scale", grad_scale}};
    Tensor param = slice(params.tensor(range.parameter), range);
    if (r < copies_.size() && copies_[r].defined()) {
      attrs.set("copy_dtype", std::string(dtype_name(copies_[r].dtype())));
      dispatcher.run("adamw_with_copy", {param, grads.at(r), m_[r], v_[r]}, {param, m_[r], v_[r], copies_[r]}, attrs);
    } else {
      dispatcher.run("adamw", {param, grads.at(r), m_[r], v_[r]}, {param, m_[r], v_[r]}, attrs);
    }
  }
}

void AdamW::keep_copies(std::vector<Tensor> copies) {
  STRATA_CHECK(copies.size() == ranges_.size(), "{} copies for {} optimizer ranges", copies.size(), ranges_.size());
  for (size_t r = 0; r < copies.size(); ++r) {
    if (!copies[r].defined()) continue;
    STRATA_CHECK(copies[r].numel() == ranges_[r].length && copies[r].is_contiguous(),
                 "copy of {} elements for a range of {}", copies[r].numel(), ranges_[r].length);
    copies[r] = copies[r].reshape({copies[r].numel()});
  }
  copies_ = std::move(copies);
}

void AdamW::export_moments(std::vector<Tensor>& first, std::vector<Tensor>& second) const {
  for (size_t r = 0; r < ranges_.size(); ++r) {
    slice(first[ranges_[r].parameter], ranges_[r]).copy_from(m_[r]);
    slice(second[ranges_[r].parameter], ranges_[r]).copy_from(v_[r]);
  }
}

void AdamW::import_moments(const std::vector<Tensor>& first, const std::vector<Tensor>& second) {
  for (size_t r = 0; r < ranges_.size(); ++r) {
    m_[r].copy_from(slice(first[ranges_[r].parameter], ranges_[r]));
    v_[r].copy_from(slice(second[ranges_[r].parameter], ranges_[r]));
  }
}

size_t AdamW::state_bytes() const {
  size_t bytes = 0;
  for (size_t r = 0; r < ranges_.size(); ++r) bytes += m_[r].nbytes() + v_[r].nbytes();
  return bytes;
}

ExactSquareSum square_sum(const std::vector<Tensor>& grads, Dispatcher& dispatcher) {
  ExactSquareSum total;
  for (const Tensor& grad : grads) {
    // The words come to the host: the norm is a metric, and decides clipping and skipping there.
    const Tensor words = dispatcher.call("square_sum_exact", {grad})[0].to_host();
    total.merge(ExactSquareSum::from_words(words.data<int64_t>()));
  }
  return total;
}

double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

}  // namespace strata
