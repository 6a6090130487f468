// grouped_matmul and its weight gradient, all the experts' work in one kernel call (not a GEMM call per
// expert from the graph), as one parallel loop: the forward and the input gradient cut each expert's
// rows into blocks and run every (expert, block) as one task; the weight gradient runs one task per
// expert, which sums over all that expert's rows. f32 runs on oneDNN's sgemm; bf16 natively on oneDNN's
// bf16 matmul (f32 sums, each output rounded once, as the dense bf16 matmul), its row count (the sum's
// length for the weight gradient) left to execution so that one primitive per shape serves every group
// size. Each task's product runs on its thread alone (oneDNN does not nest inside an OpenMP region) and
// every output element is one task's, so results do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "backends/cpu/bf16_gemm.h"
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

// y [m, n] = x [m, k] times w^T (w [n, k], trans_b) or w [k, n].
void block_product(bool trans_b, int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
  sgemm(false, trans_b, m, n, k, x, w, 0.0f, y);
}

void block_product(bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* x, const bf16* w, bf16* y) {
  gemm_bf16_runtime(GemmRuntimeDim::M, false, trans_b, m, n, k, x, w, y);
}

// out [m, n] = a^T b over `rows` rows, a [rows, m], b [rows, n].
void expert_weight_grad(int64_t m, int64_t n, int64_t rows, const float* a, const float* b, float* out) {
  sgemm(true, false, m, n, rows, a, b, 0.0f, out);
}

void expert_weight_grad(int64_t m, int64_t n, int64_t rows, const bf16* a, const bf16* b, bf16* out) {
  gemm_bf16_runtime(GemmRuntimeDim::K, true, false, m, n, rows, a, b, out);
}

template <typename T>
void grouped_matmul(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const int64_t rows = in[0].size(0), k = in[0].size(1), n = out[0].size(1);
  const std::vector<int64_t> starts = group_starts("grouped_matmul", in[2], rows);
  const std::vector<RowBlock> blocks = row_blocks(starts);
  const bool trans_b = attrs.get_bool("trans_b");
  const T* x = in[0].data<T>();
  const T* w = in[1].data<T>();
  T* y = out[0].data<T>();
  const auto count = static_cast<int64_t>(blocks.size());
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    const RowBlock& block = blocks[static_cast<size_t>(i)];
    block_product(trans_b, block.end - block.begin, n, k, x + block.begin * k, w + block.expert * n * k,
                  y + block.begin * n);
  }
  std::fill(y + starts.back() * n, y + rows * n, T{});
}

template <typename T>
void grouped_matmul_weight_grad(const Tensors& in, const Tensors& out, const Attrs&) {
  const int64_t m = in[0].size(1), n = in[1].size(1), experts = in[2].numel();
  const std::vector<int64_t> starts = group_starts("grouped_matmul_weight_grad", in[2], in[0].size(0));
  const T* a = in[0].data<T>();
  const T* b = in[1].data<T>();
  T* result = out[0].data<T>();
#pragma omp parallel for schedule(dynamic, 1) if (experts > 1)
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t begin = starts[static_cast<size_t>(e)], end = starts[static_cast<size_t>(e) + 1];
    expert_weight_grad(m, n, end - begin, a + begin * m, b + begin * n, result + e * m * n);
  }
}

}  // namespace

void register_grouped_matmul(Backend& backend) {
  backend.add_kernel("grouped_matmul", DType::F32, grouped_matmul<float>);
  backend.add_kernel("grouped_matmul_weight_grad", DType::F32, grouped_matmul_weight_grad<float>);
  backend.add_kernel("grouped_matmul", DType::BF16, grouped_matmul<bf16>);
  backend.add_kernel("grouped_matmul_weight_grad", DType::BF16, grouped_matmul_weight_grad<bf16>);
}

}  // namespace strata::cpu
