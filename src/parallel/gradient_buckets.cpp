#include "parallel/gradient_buckets.h"

#include "core/error.h"

namespace strata {

GradientBuckets::GradientBuckets(const std::vector<Shape>& parameter_shapes, size_t bucket_bytes) {
  STRATA_CHECK(bucket_bytes > 0, "gradient buckets of 0 bytes");
  const size_t bucket_elements = std::max<size_t>(1, bucket_bytes / sizeof(float));
  std::vector<size_t> sizes;
  for (const Shape& shape : parameter_shapes) sizes.push_back(static_cast<size_t>(shape_numel(shape)));
  size_t filled = 0;
  for (size_t i = parameter_shapes.size(); i-- > 0;) {
    if (members_.empty() || (filled > 0 && filled + sizes[i] > bucket_elements)) {
      members_.emplace_back();
      filled = 0;
    }
    members_.back().push_back(i);
    filled += sizes[i];
  }
  grads_.resize(parameter_shapes.size());
  for (const std::vector<size_t>& members : members_) {
    int64_t total = 0;
    for (size_t i : members) total += static_cast<int64_t>(sizes[i]);
    Tensor flat = Tensor::zeros({total}, DType::F32);
    int64_t offset = 0;
    for (size_t i : members) {
      grads_[i] = flat.narrow(0, offset, static_cast<int64_t>(sizes[i])).reshape(parameter_shapes[i]);
      offset += static_cast<int64_t>(sizes[i]);
    }
    buckets_.push_back(std::move(flat));
  }
}

}  // namespace strata
