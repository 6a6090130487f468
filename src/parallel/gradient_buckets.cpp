#include "parallel/gradient_buckets.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

GradientBuckets::GradientBuckets(const std::vector<Shape>& parameter_shapes, size_t bucket_bytes, int ranks,
                                 GradientStorage storage, const std::vector<size_t>& alone)
    : ranks_(ranks), shapes_(parameter_shapes) {
  STRATA_CHECK(bucket_bytes > 0, "gradient buckets of 0 bytes");
  STRATA_CHECK(ranks >= 1, "gradient buckets for {} ranks", ranks);
  const int64_t bucket_elements = std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes / sizeof(float)));
  offsets_.assign(parameter_shapes.size(), 0);
  int64_t filled = 0;
  bool last_alone = false;
  for (size_t i = parameter_shapes.size(); i-- > 0;) {
    const int64_t size = shape_numel(parameter_shapes[i]);
    const bool is_alone = std::find(alone.begin(), alone.end(), i) != alone.end();
    if (members_.empty() || (filled > 0 && (filled + size > bucket_elements || is_alone || last_alone))) {
      members_.emplace_back();
      elements_.push_back(0);
      filled = 0;
    }
    last_alone = is_alone;
    members_.back().push_back(i);
    offsets_[i] = filled;
    filled += size;
    elements_.back() = filled;
  }
  for (int64_t elements : elements_) blocks_.push_back((elements + ranks - 1) / ranks);
  if (storage.whole) {
    grads_.resize(parameter_shapes.size());
    for (size_t b = 0; b < members_.size(); ++b) {
      buckets_.push_back(Tensor::zeros({blocks_[b] * ranks}, DType::F32, *storage.device));
      for (size_t p : members_[b]) grads_[p] = view(buckets_.back(), p);
    }
  }
  if (storage.shards) {
    for (int64_t block : blocks_) shards_.push_back(Tensor::zeros({block}, DType::F32, *storage.device));
  }
  if (!storage.whole) {
    for (int slot = 0; slot < storage.staging; ++slot) {
      staging_.push_back(Tensor::zeros({largest_padded_bucket()}, DType::F32, *storage.device));
    }
  }
}

int64_t GradientBuckets::padded_elements() const {
  int64_t total = 0;
  for (int64_t block : blocks_) total += block * ranks_;
  return total;
}

int64_t GradientBuckets::largest_padded_bucket() const {
  return *std::max_element(blocks_.begin(), blocks_.end()) * ranks_;
}

Tensor GradientBuckets::view(const Tensor& buffer, size_t parameter) const {
  return buffer.narrow(0, offsets_.at(parameter), shape_numel(shapes_.at(parameter))).reshape(shapes_[parameter]);
}

size_t GradientBuckets::bytes() const {
  size_t total = 0;
  for (const std::vector<Tensor>* buffers : {&buckets_, &shards_, &staging_}) {
    for (const Tensor& buffer : *buffers) total += buffer.nbytes();
  }
  return total;
}

}  // namespace strata
