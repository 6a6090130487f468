// matmul, linear and bmm in f32 on CLBlast's GEMMs, queued on the tensors' device.
#include <clblast_c.h>

#include <fmt/format.h>

#include "backends/opencl/launch.h"
#include "backends/opencl/opencl_ops.h"

namespace strata::opencl {

namespace {

void check_blast(CLBlastStatusCode status, const char* call) {
  if (status != CLBlastSuccess) fail("OpenCL: CLBlast {} failed with status {}", call, static_cast<int>(status));
}

size_t elements_before(const Tensor& tensor) { return tensor.offset_bytes() / dtype_size(tensor.dtype()); }

// Row-major C [m, n] = alpha op(A) op(B) + beta C, each operand at its tensor's offset.
void gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, const Tensor& a, size_t lda, const Tensor& b,
          size_t ldb, float beta, const Tensor& c) {
  const OpenCLDevice& device = device_of(c);
  cl_command_queue queue = device.queue();
  std::lock_guard lock(device.launch_mutex());
  check_blast(CLBlastSgemm(CLBlastLayoutRowMajor, trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
                           trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, k, 1.0f, memory_of(a.buffer()),
                           elements_before(a), lda, memory_of(b.buffer()), elements_before(b), ldb, beta,
                           memory_of(c.buffer()), elements_before(c), n, &queue, nullptr),
              "Sgemm");
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
  check_blast(CLBlastSgemmStridedBatched(
                  CLBlastLayoutRowMajor, trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
                  trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, m, p, k, 1.0f, memory_of(a.buffer()),
                  elements_before(a), a_cols, a_rows * a_cols, memory_of(b.buffer()), elements_before(b), b_cols,
                  b_rows * b_cols, 0.0f, memory_of(out[0].buffer()), elements_before(out[0]), p, m * p, batch, &queue,
                  nullptr),
              "SgemmStridedBatched");
}

}  // namespace

void register_matmul(Backend& backend) {
  backend.add_kernel("matmul", DType::F32, matmul);
  backend.add_kernel("linear", DType::F32, linear);
  backend.add_kernel("bmm", DType::F32, bmm);
}

}  // namespace strata::opencl
