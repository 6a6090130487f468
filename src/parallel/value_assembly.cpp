#include "parallel/value_assembly.h"

#include "core/error.h"
#include "core/tensor_box.h"

namespace strata {

namespace {

Tensor sum_of_terms(const std::vector<Tensor>& terms) {
  Tensor sum = Tensor::zeros(terms.front().shape(), DType::F64);
  double* total = sum.data<double>();
  for (const Tensor& term : terms) {
    const Tensor wide = term.to(DType::F64);
    const double* values = wide.data<double>();
    for (int64_t i = 0; i < sum.numel(); ++i) total[i] += values[i];
  }
  return sum;
}

Tensor side_by_side(const std::vector<Tensor>& pieces, const ValueLayout& layout) {
  const size_t dim = static_cast<size_t>(layout.dim);
  Shape whole = pieces.front().shape();
  whole[dim] = 0;
  for (const Tensor& piece : pieces) whole[dim] += piece.shape()[dim];
  Tensor assembled = Tensor::empty(whole, pieces.front().dtype());
  const int64_t part = whole[dim] / layout.parts;
  int64_t before = 0;  // of each part: the rows the earlier ranks hold
  for (const Tensor& piece : pieces) {
    const Tensor contiguous = piece.is_contiguous() ? piece : piece.clone();
    const int64_t rows = piece.shape()[dim] / layout.parts;
    for (int64_t p = 0; p < layout.parts; ++p) {
      std::vector<int64_t> from(whole.size(), 0), to(whole.size(), 0);
      Shape lengths = piece.shape();
      from[dim] = p * rows;
      to[dim] = p * part + before;
      lengths[dim] = rows;
      copy_box(contiguous, from, assembled, to, lengths);
    }
    before += rows;
  }
  return assembled;
}

}  // namespace

Tensor assemble_value(const std::string& name, const std::vector<Tensor>& pieces, const ValueLayout& layout) {
  STRATA_CHECK(!pieces.empty(), "'{}': no rank's tensor to assemble", name);
  const Shape& first = pieces.front().shape();
  for (const Tensor& piece : pieces) {
    bool fits = piece.shape().size() == first.size() && piece.dtype() == pieces.front().dtype();
    for (size_t d = 0; fits && d < first.size(); ++d) {
      const bool cut = layout.kind == ValueLayout::Kind::Split && static_cast<int64_t>(d) == layout.dim;
      fits = cut ? piece.shape()[d] % layout.parts == 0 : piece.shape()[d] == first[d];
    }
    if (!fits) {
      fail("'{}': the ranks' tensors {} and {} ({} and {}) do not make one value as laid out", name, shape_str(first),
           shape_str(piece.shape()), dtype_name(pieces.front().dtype()), dtype_name(piece.dtype()));
    }
  }
  switch (layout.kind) {
    case ValueLayout::Kind::Whole: return pieces.front().clone();
    case ValueLayout::Kind::Partial: return sum_of_terms(pieces);
    case ValueLayout::Kind::Split: return side_by_side(pieces, layout);
  }
  return {};
}

}  // namespace strata
