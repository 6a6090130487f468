// grouped_matmul and its weight gradient in f32 on oneDNN's sgemm, as one parallel loop over all the
// experts' work inside the kernel (not a GEMM call per expert from the graph): the forward and the
// input gradient cut each expert's rows into blocks and run every (expert, block) as one task; the
// weight gradient runs one task per expert, which sums over all that expert's rows. Each task's sgemm
// runs on its thread alone (oneDNN does not nest inside an OpenMP region) and every output element is
// one task's, so results do not depend on the thread count.
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/gemm.h"

namespace strata::cpu {

namespace {

constexpr int64_t kBlockRows = 128;

// Each group's first row and its end, checked against the rows there are.
std::vector<int64_t> group_starts(const std::string& op, const Tensor& group_sizes, int64_t rows) {
  const int32_t* sizes = group_sizes.data<int32_t>();
  std::vector<int64_t> starts{0};
  for (int64_t e = 0; e < group_sizes.numel(); ++e) {
    if (sizes[e] < 0) fail("op '{}': input 'group_sizes' holds {} for expert {}, a negative count", op, sizes[e], e);
    starts.push_back(starts.back() + sizes[e]);
  }
  if (starts.back() > rows) {
    fail("op '{}': input 'group_sizes' sums to {}, more than the {} rows", op, starts.back(), rows);
  }
  return starts;
}

struct RowBlock {
  int64_t expert, begin, end;
};

std::vector<RowBlock> row_blocks(const std::vector<int64_t>& starts) {
  std::vector<RowBlock> blocks;
  for (size_t e = 0; e + 1 < starts.size(); ++e) {
    for (int64_t begin = starts[e]; begin < starts[e + 1]; begin += kBlockRows) {
      blocks.push_back({static_cast<int64_t>(e), begin, std::min(starts[e + 1], begin + kBlockRows)});
    }
  }
  return blocks;
}

void grouped_matmul(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const int64_t rows = in[0].size(0), k = in[0].size(1), n = out[0].size(1);
  const std::vector<int64_t> starts = group_starts("grouped_matmul", in[2], rows);
  const std::vector<RowBlock> blocks = row_blocks(starts);
  const bool trans_b = attrs.get_bool("trans_b");
  const float* x = in[0].data<float>();
  const float* w = in[1].data<float>();
  float* y = out[0].data<float>();
  const auto count = static_cast<int64_t>(blocks.size());
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    const RowBlock& block = blocks[static_cast<size_t>(i)];
    sgemm(false, trans_b, block.end - block.begin, n, k, x + block.begin * k, w + block.expert * n * k, 0.0f,
          y + block.begin * n);
  }
  std::memset(y + starts.back() * n, 0, static_cast<size_t>((rows - starts.back()) * n) * sizeof(float));
}

void grouped_matmul_weight_grad(const Tensors& in, const Tensors& out, const Attrs&) {
  const int64_t m = in[0].size(1), n = in[1].size(1), experts = in[2].numel();
  const std::vector<int64_t> starts = group_starts("grouped_matmul_weight_grad", in[2], in[0].size(0));
  const float* a = in[0].data<float>();
  const float* b = in[1].data<float>();
  float* result = out[0].data<float>();
#pragma omp parallel for schedule(dynamic, 1) if (experts > 1)
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t begin = starts[static_cast<size_t>(e)], end = starts[static_cast<size_t>(e) + 1];
    sgemm(true, false, m, n, end - begin, a + begin * m, b + begin * n, 0.0f, result + e * m * n);
  }
}

}  // namespace

void register_grouped_matmul(Backend& backend) {
  backend.add_kernel("grouped_matmul", DType::F32, grouped_matmul);
  backend.add_kernel("grouped_matmul_weight_grad", DType::F32, grouped_matmul_weight_grad);
}

}  // namespace strata::cpu
