// matmul, linear and bmm in f32 on CLBlast's GEMMs, queued on the tensors' device.
#include <clblast_c.h>

#include <fmt/format.h>

#include <vector>

#include "backends/opencl/launch.h"
#include "backends/opencl/opencl_ops.h"
#include "ops/sum_order.h"

namespace strata::opencl {

namespace {

void check_blast(CLBlastStatusCode status, const char* call) {
  if (status != CLBlastSuccess) fail("OpenCL: CLBlast {} failed with status {}", call, static_cast<int>(status));
}

size_t elements_before(const Tensor& tensor) { return tensor.offset_bytes() / dtype_size(tensor.dtype()); }

// The terms [first, first + count) of every sum: where they start in a and b (k runs along a's rows when
// a is transposed, along b's when b is not).
struct Terms {
  size_t first, count;
  size_t a_offset(bool trans_a, size_t lda) const { return trans_a ? first * lda : first; }
  size_t b_offset(bool trans_b, size_t ldb) const { return trans_b ? first : first * ldb; }
};

// The terms of k in the order ops.sum_order asks: all of them, or (permuted) those from
// permuted_sum_start(k) on first, then those before it, as the cpu backend's sgemm does.
std::vector<Terms> term_order(size_t k) {
  if (sum_order() != SumOrder::Permuted || k < 2) return {{0, k}};
  const auto split = static_cast<size_t>(permuted_sum_start(static_cast<int64_t>(k)));
  return {{split, k - split}, {0, split}};
}

// Row-major C [m, n] = op(A) op(B) + beta C, each operand at its tensor's offset, its sums in ops.sum_order.
void gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, const Tensor& a, size_t lda, const Tensor& b,
          size_t ldb, float beta, const Tensor& c) {
  const OpenCLDevice& device = device_of(c);
  cl_command_queue queue = device.queue();
  std::lock_guard lock(device.launch_mutex());
  float terms_beta = beta;  // the first call scales c, the later ones add to it
  for (const Terms& terms : term_order(k)) {
    check_blast(CLBlastSgemm(CLBlastLayoutRowMajor, trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
                             trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, terms.count, 1.0f,
                             memory_of(a.buffer()), elements_before(a) + terms.a_offset(trans_a, lda), lda,
                             memory_of(b.buffer()), elements_before(b) + terms.b_offset(trans_b, ldb), ldb,
                             terms_beta, memory_of(c.buffer()), elements_before(c), n, &queue, nullptr),
                "Sgemm");
    terms_beta = 1.0f;
  }
}

void matmul(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  const size_t a_last = static_cast<size_t>(a.size(-1));
  const size_t a_rows = static_cast<size_t>(leading_rows(a));
  if (attrs.get_bool("trans_a")) {  // out [K, N] = a^T b over the rows both share
    const size_t n = static_cast<size_t>(b.size(-1));
    gemm(true, false, a_last, n, a_rows, a, a_last, b, n, 0.0f, out[0]);
    return;
  }
  const bool trans_b = attrs.get_bool("trans_b");
  const size_t n = static_cast<size_t>(trans_b ? b.size(0) : b.size(1));
  gemm(false, trans_b, a_rows, n, a_last, a, a_last, b, static_cast<size_t>(b.size(1)), 0.0f, out[0]);
}

const std::string kBiasSource = R"CLC(
__kernel void broadcast_rows(__global const float* bias, ulong bias_off, __global float* y, ulong y_off,
                             ulong n, ulong total) {
  size_t i = get_global_id(0);
  if (i >= total) return;
  y[y_off + i] = bias[bias_off + i % n];
}
)CLC";

// The bias is copied into every output row and the GEMM accumulates onto it (beta = 1).
void linear(const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& x = in[0];
  const size_t k = static_cast<size_t>(x.size(-1));
  const size_t n = static_cast<size_t>(in[1].size(1));
  const size_t m = static_cast<size_t>(leading_rows(x));
  {
    Launch launch(out[0], kBiasSource, "broadcast_rows");
    launch.tensor(in[2]).tensor(out[0]).value<cl_ulong>(n).value<cl_ulong>(m * n).run(m * n, 256);
  }
  gemm(false, false, m, n, k, x, k, in[1], n, 1.0f, out[0]);
}

// Every leading index is one GEMM of CLBlast's strided batch.
void bmm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  const bool trans_a = attrs.get_bool("trans_a");
  const bool trans_b = attrs.get_bool("trans_b");
  const size_t a_rows = static_cast<size_t>(a.size(-2)), a_cols = static_cast<size_t>(a.size(-1));
  const size_t b_rows = static_cast<size_t>(b.size(-2)), b_cols = static_cast<size_t>(b.size(-1));
  const size_t m = trans_a ? a_cols : a_rows;
  const size_t k = trans_a ? a_rows : a_cols;
  const size_t p = trans_b ? b_rows : b_cols;
  const size_t batch = static_cast<size_t>(out[0].numel()) / std::max<size_t>(m * p, 1);
  if (batch == 0 || m == 0 || p == 0) return;
  const OpenCLDevice& device = device_of(out[0]);
  cl_command_queue queue = device.queue();
  std::lock_guard lock(device.launch_mutex());
  if (k == 0) {
    check(clEnqueueFillBuffer(queue, memory_of(out[0].buffer()), &kZeroFloat, sizeof(float), out[0].offset_bytes(),
                              out[0].nbytes(), 0, nullptr, nullptr),
          "clEnqueueFillBuffer");
    return;
  }
  float terms_beta = 0.0f;
  for (const Terms& terms : term_order(k)) {
    check_blast(CLBlastSgemmStridedBatched(
                    CLBlastLayoutRowMajor, trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
                    trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, m, p, terms.count, 1.0f, memory_of(a.buffer()),
                    elements_before(a) + terms.a_offset(trans_a, a_cols), a_cols, a_rows * a_cols,
                    memory_of(b.buffer()), elements_before(b) + terms.b_offset(trans_b, b_cols), b_cols,
                    b_rows * b_cols, terms_beta, memory_of(out[0].buffer()), elements_before(out[0]), p, m * p, batch,
                    &queue, nullptr),
                "SgemmStridedBatched");
    terms_beta = 1.0f;
  }
}

}  // namespace

void register_matmul(Backend& backend) {
  backend.add_kernel("matmul", DType::F32, matmul);
  backend.add_kernel("linear", DType::F32, linear);
  backend.add_kernel("bmm", DType::F32, bmm);
}

}  // namespace strata::opencl
