// layernorm and rms_norm, their backwards and their residual-fused forms (add_layernorm,
// layernorm_backward_add, add_rms_norm, rms_norm_backward_add) in f32, with the cpu kernels'
// arithmetic: f32 row statistics, then each output rounded once. One work-group per row sums the
// row with a local-memory tree in a fixed order. The backwards run one work-group per block of
// kBlockRows rows, which owns its block's column sums (dgamma and dbeta, or dweight), then one
// work-item per column adds the blocks in block order (in f64 where the device has it): every
// result is the same run to run, without atomics. The fused ops' residual or dy may be bf16 or f16
// (a widening cast the fusion pass absorbed): the program is built once per such dtype. add_rms_norm's
// y may be narrower (a narrowing cast absorbed): it is written in f32 and cast after, as unfused.
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "backends/opencl/cl_common.h"
#include "backends/opencl/launch.h"
#include "backends/opencl/opencl_ops.h"

namespace strata::opencl {

namespace {

constexpr size_t kRowThreads = 256;  // work-items per row (a power of two: the tree halves it)
constexpr size_t kBlockRows = 16;    // rows per work-group of the backwards

// NARROW and load_narrow (the residual's or dy's storage, read as f32) come from norm_source,
// group_sum and `wide` from kRowReductionPrelude.
const std::string kNormBody = R"CLC(
// sum_row = x_row + r_row rounded to f32. Each work-item later reads back only what it wrote.
void add_residual_row(__global const float* x_row, __global const NARROW* r, ulong r_start, ulong width,
                      __global float* sum_row) {
  for (ulong c = get_local_id(0); c < width; c += ROW_THREADS) sum_row[c] = x_row[c] + load_narrow(r, r_start + c);
}

void layernorm_row(__global const float* row, __global const float* gamma, __global const float* beta, ulong width,
                   float eps, __global float* y_row, __global float* mean, __global float* rstd,
                   __local float* scratch) {
  const uint lid = get_local_id(0);
  float sum = 0.0f;
  for (ulong c = lid; c < width; c += ROW_THREADS) sum += row[c];
  const float row_mean = group_sum(sum, scratch) / (float)width;
  float squares = 0.0f;
  for (ulong c = lid; c < width; c += ROW_THREADS) squares += (row[c] - row_mean) * (row[c] - row_mean);
  const float row_rstd = 1.0f / sqrt(group_sum(squares, scratch) / (float)width + eps);
  for (ulong c = lid; c < width; c += ROW_THREADS) y_row[c] = (row[c] - row_mean) * row_rstd * gamma[c] + beta[c];
  if (lid == 0) {
    *mean = row_mean;
    *rstd = row_rstd;
  }
}

__kernel void layernorm(__global const float* x, ulong x_off, __global const float* gamma, ulong gamma_off,
                        __global const float* beta, ulong beta_off, __global float* y, ulong y_off,
                        __global float* mean, ulong mean_off, __global float* rstd, ulong rstd_off, ulong width,
                        float eps) {
  __local float scratch[ROW_THREADS];
  const ulong row = get_group_id(0);
  layernorm_row(x + x_off + row * width, gamma + gamma_off, beta + beta_off, width, eps, y + y_off + row * width,
                mean + mean_off + row, rstd + rstd_off + row, scratch);
}

// r's rows repeat over x's leading dims (r_rows of them).
__kernel void add_layernorm(__global const float* x, ulong x_off, __global const NARROW* r, ulong r_off, ulong r_rows,
                            __global const float* gamma, ulong gamma_off, __global const float* beta, ulong beta_off,
                            __global float* sum, ulong sum_off, __global float* y, ulong y_off, __global float* mean,
                            ulong mean_off, __global float* rstd, ulong rstd_off, ulong width, float eps) {
  __local float scratch[ROW_THREADS];
  const ulong row = get_group_id(0);
  __global float* sum_row = sum + sum_off + row * width;
  add_residual_row(x + x_off + row * width, r, r_off + (row % r_rows) * width, width, sum_row);
  layernorm_row(sum_row, gamma + gamma_off, beta + beta_off, width, eps, y + y_off + row * width,
                mean + mean_off + row, rstd + rstd_off + row, scratch);
}

// dx (plus dres when add_residual) for rows [block * BLOCK_ROWS, ...), and the block's sums of
// dy * xhat and dy into partials[block][0, width) and [width, 2 width).
__kernel void layernorm_backward(__global const NARROW* dy, ulong dy_off, __global const float* x, ulong x_off,
                                 __global const float* gamma, ulong gamma_off, __global const float* mean,
                                 ulong mean_off, __global const float* rstd, ulong rstd_off,
                                 __global const float* dres, ulong dres_off, int add_residual, __global float* dx,
                                 ulong dx_off, __global float* partials, ulong partials_off, ulong rows,
                                 ulong width) {
  __local float scratch[ROW_THREADS];
  const uint lid = get_local_id(0);
  const ulong block = get_group_id(0);
  __global float* dgamma = partials + partials_off + block * 2 * width;
  __global float* dbeta = dgamma + width;
  for (ulong c = lid; c < width; c += ROW_THREADS) {
    dgamma[c] = 0.0f;
    dbeta[c] = 0.0f;
  }
  const ulong end = min(rows, (block + 1) * BLOCK_ROWS);
  for (ulong r = block * BLOCK_ROWS; r < end; ++r) {
    const ulong base = r * width;
    const float row_mean = mean[mean_off + r], row_rstd = rstd[rstd_off + r];
    float g_sum = 0.0f, g_xhat_sum = 0.0f;  // of gamma * dy and gamma * dy * xhat
    for (ulong c = lid; c < width; c += ROW_THREADS) {
      const float d = load_narrow(dy, dy_off + base + c);
      const float xhat = (x[x_off + base + c] - row_mean) * row_rstd;
      const float g = gamma[gamma_off + c] * d;
      g_sum += g;
      g_xhat_sum += g * xhat;
      dgamma[c] += d * xhat;
      dbeta[c] += d;
    }
    const float mean_g = group_sum(g_sum, scratch) / (float)width;
    const float mean_g_xhat = group_sum(g_xhat_sum, scratch) / (float)width;
    for (ulong c = lid; c < width; c += ROW_THREADS) {
      const float d = load_narrow(dy, dy_off + base + c);
      const float xhat = (x[x_off + base + c] - row_mean) * row_rstd;
      const float local_dx = row_rstd * (gamma[gamma_off + c] * d - mean_g - xhat * mean_g_xhat);
      dx[dx_off + base + c] = add_residual ? dres[dres_off + base + c] + local_dx : local_dx;
    }
  }
}

// out[c] = the sum over blocks, in block order, of partials[block * stride + first + c].
__kernel void sum_column_blocks(__global const float* partials, ulong partials_off, ulong blocks, ulong stride,
                                ulong first, ulong width, __global float* out, ulong out_off) {
  const ulong c = get_global_id(0);
  if (c >= width) return;
  wide total = 0;
  for (ulong block = 0; block < blocks; ++block) total += (wide)partials[partials_off + block * stride + first + c];
  out[out_off + c] = (float)total;
}

float rms_rstd(__global const float* row, ulong width, float eps, __local float* scratch) {
  float squares = 0.0f;
  for (ulong c = get_local_id(0); c < width; c += ROW_THREADS) squares += row[c] * row[c];
  return 1.0f / sqrt(group_sum(squares, scratch) / (float)width + eps);
}

// y = weight * h with h = row * rstd (LlamaRMSNorm rounds h to x's dtype: f32 here, so it is exact).
void rms_norm_row(__global const float* row, __global const float* weight, ulong width, float eps,
                  __global float* y_row, __local float* scratch) {
  const float rstd = rms_rstd(row, width, eps, scratch);
  for (ulong c = get_local_id(0); c < width; c += ROW_THREADS) y_row[c] = weight[c] * (row[c] * rstd);
}

__kernel void rms_norm(__global const float* x, ulong x_off, __global const float* weight, ulong weight_off,
                       __global float* y, ulong y_off, ulong width, float eps) {
  __local float scratch[ROW_THREADS];
  const ulong row = get_group_id(0);
  rms_norm_row(x + x_off + row * width, weight + weight_off, width, eps, y + y_off + row * width, scratch);
}

__kernel void add_rms_norm(__global const float* x, ulong x_off, __global const NARROW* r, ulong r_off, ulong r_rows,
                           __global const float* weight, ulong weight_off, __global float* sum, ulong sum_off,
                           __global float* y, ulong y_off, ulong width, float eps) {
  __local float scratch[ROW_THREADS];
  const ulong row = get_group_id(0);
  __global float* sum_row = sum + sum_off + row * width;
  add_residual_row(x + x_off + row * width, r, r_off + (row % r_rows) * width, width, sum_row);
  rms_norm_row(sum_row, weight + weight_off, width, eps, y + y_off + row * width, scratch);
}

// dx (plus dres when add_residual) for the block's rows, its statistic recomputed from x, and
// the block's sums of dy * h into partials[block][0, width).
__kernel void rms_norm_backward(__global const NARROW* dy, ulong dy_off, __global const float* x, ulong x_off,
                                __global const float* weight, ulong weight_off, __global const float* dres,
                                ulong dres_off, int add_residual, __global float* dx, ulong dx_off,
                                __global float* partials, ulong partials_off, ulong rows, ulong width, float eps) {
  __local float scratch[ROW_THREADS];
  const uint lid = get_local_id(0);
  const ulong block = get_group_id(0);
  __global float* dweight = partials + partials_off + block * width;
  for (ulong c = lid; c < width; c += ROW_THREADS) dweight[c] = 0.0f;
  const ulong end = min(rows, (block + 1) * BLOCK_ROWS);
  for (ulong r = block * BLOCK_ROWS; r < end; ++r) {
    const ulong base = r * width;
    const float rstd = rms_rstd(x + x_off + base, width, eps, scratch);
    float gh_sum = 0.0f;  // of weight * dy * h
    for (ulong c = lid; c < width; c += ROW_THREADS) {
      const float d = load_narrow(dy, dy_off + base + c);
      const float h = x[x_off + base + c] * rstd;
      gh_sum += weight[weight_off + c] * d * h;
      dweight[c] += d * h;
    }
    const float mean_gh = group_sum(gh_sum, scratch) / (float)width;
    for (ulong c = lid; c < width; c += ROW_THREADS) {
      const float d = load_narrow(dy, dy_off + base + c);
      const float h = x[x_off + base + c] * rstd;
      const float local_dx = rstd * (weight[weight_off + c] * d - h * mean_gh);
      dx[dx_off + base + c] = add_residual ? dres[dres_off + base + c] + local_dx : local_dx;
    }
  }
}
)CLC";

// The norm program whose NARROW inputs (add_*'s r, *_backward's dy) are stored as `narrow`.
const std::string& norm_source(const std::string& op, DType narrow) {
  static const std::string header =
      fmt::format("#define ROW_THREADS {}\n#define BLOCK_ROWS {}\n", kRowThreads, kBlockRows);
  static const std::string body = kRowReductionPrelude + kNormBody;
  static const std::string f32 = header + "#define NARROW float\n#define load_narrow(p, i) ((p)[i])\n" + body;
  static const std::string bf16 =
      header + "#define NARROW ushort\n#define load_narrow(p, i) as_float((uint)(p)[i] << 16)\n" + body;
  static const std::string f16 =
      header + "#define NARROW half\n#define load_narrow(p, i) vload_half((i), (p))\n" + body;
  switch (narrow) {
    case DType::F32: return f32;
    case DType::BF16: return bf16;
    case DType::F16: return f16;
    default: fail("op '{}': the opencl kernel reads f32, bf16 or f16 for f32 x, got {}", op, dtype_name(narrow));
  }
}

float eps_of(const Attrs& attrs) { return static_cast<float>(attrs.get_float("eps")); }

void layernorm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const size_t width = static_cast<size_t>(in[0].size(-1));
  Launch(out[0], norm_source("layernorm", DType::F32), "layernorm")
      .tensor(in[0]).tensor(in[1]).tensor(in[2]).tensor(out[0]).tensor(out[1]).tensor(out[2])
      .value<cl_ulong>(width).value<cl_float>(eps_of(attrs))
      .run(static_cast<size_t>(leading_rows(in[0])) * kRowThreads, kRowThreads);
}

// The f32 y the add_rms_norm kernel writes: `y` itself, or a scratch tensor when y is narrower
// (y_dtype), which narrow_y then casts into y.
Tensor f32_y(const Tensor& y) {
  return y.dtype() == DType::F32 ? y : Tensor::empty(y.shape(), DType::F32, y.device());
}

void narrow_y(const Tensor& f32, const Tensor& y) {
  if (y.dtype() != DType::F32) cast_on_device(f32, y);
}

void add_layernorm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const size_t width = static_cast<size_t>(in[0].size(-1));
  Launch(out[0], norm_source("add_layernorm", in[1].dtype()), "add_layernorm")
      .tensor(in[0]).tensor(in[1]).value<cl_ulong>(static_cast<size_t>(in[1].numel()) / width)
      .tensor(in[2]).tensor(in[3]).tensor(out[0]).tensor(out[1]).tensor(out[2]).tensor(out[3])
      .value<cl_ulong>(width).value<cl_float>(eps_of(attrs))
      .run(static_cast<size_t>(leading_rows(in[0])) * kRowThreads, kRowThreads);
}

// Block partials [blocks, columns_per_block] summed per column into each of `outs`, which take
// consecutive runs of `width` columns.
void sum_blocks(const Tensor& partials, size_t blocks, size_t width, const std::string& source,
                const std::vector<Tensor>& outs) {
  const size_t stride = width * outs.size();
  for (size_t i = 0; i < outs.size(); ++i) {
    Launch(outs[i], source, "sum_column_blocks")
        .tensor(partials).value<cl_ulong>(blocks).value<cl_ulong>(stride).value<cl_ulong>(i * width)
        .value<cl_ulong>(width).tensor(outs[i])
        .run(width, 64);
  }
}

// layernorm_backward, or layernorm_backward_add when `dres` is defined. Inputs dy, x, gamma, mean, rstd.
void layernorm_backward_rows(const std::string& op, const Tensors& in, const Tensor& dres, const Tensors& out) {
  const Tensor& x = in[1];
  const size_t width = static_cast<size_t>(x.size(-1)), rows = static_cast<size_t>(leading_rows(x));
  const size_t row_blocks = (rows + kBlockRows - 1) / kBlockRows;
  const size_t blocks = std::max<size_t>(1, row_blocks);  // no rows: one block of zeros
  const std::string& source = norm_source(op, in[0].dtype());
  Tensor partials = Tensor::empty({static_cast<int64_t>(blocks), static_cast<int64_t>(2 * width)}, DType::F32,
                                        x.device());
  if (rows == 0) partials.fill_zero();
  Launch(x, source, "layernorm_backward")
      .tensor(in[0]).tensor(x).tensor(in[2]).tensor(in[3]).tensor(in[4])
      .tensor(dres.defined() ? dres : x).value<cl_int>(dres.defined() ? 1 : 0)
      .tensor(out[0]).tensor(partials).value<cl_ulong>(rows).value<cl_ulong>(width)
      .run(row_blocks * kRowThreads, kRowThreads);
  sum_blocks(partials, blocks, width, source, {out[1], out[2]});
}

void layernorm_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  layernorm_backward_rows("layernorm_backward", in, Tensor(), out);
}

void layernorm_backward_add(const Tensors& in, const Tensors& out, const Attrs&) {
  layernorm_backward_rows("layernorm_backward_add", in, in[5], out);
}

void rms_norm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const size_t width = static_cast<size_t>(in[0].size(-1));
  Launch(out[0], norm_source("rms_norm", DType::F32), "rms_norm")
      .tensor(in[0]).tensor(in[1]).tensor(out[0]).value<cl_ulong>(width).value<cl_float>(eps_of(attrs))
      .run(static_cast<size_t>(leading_rows(in[0])) * kRowThreads, kRowThreads);
}

void add_rms_norm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const size_t width = static_cast<size_t>(in[0].size(-1));
  const Tensor y = f32_y(out[1]);
  Launch(out[0], norm_source("add_rms_norm", in[1].dtype()), "add_rms_norm")
      .tensor(in[0]).tensor(in[1]).value<cl_ulong>(static_cast<size_t>(in[1].numel()) / width)
      .tensor(in[2]).tensor(out[0]).tensor(y).value<cl_ulong>(width).value<cl_float>(eps_of(attrs))
      .run(static_cast<size_t>(leading_rows(in[0])) * kRowThreads, kRowThreads);
  narrow_y(y, out[1]);
}

// rms_norm_backward, or rms_norm_backward_add when `dres` is defined. Inputs dy, x, weight.
void rms_norm_backward_rows(const std::string& op, const Tensors& in, const Tensor& dres, const Tensors& out,
                            const Attrs& attrs) {
  const Tensor& x = in[1];
  const size_t width = static_cast<size_t>(x.size(-1)), rows = static_cast<size_t>(leading_rows(x));
  const size_t row_blocks = (rows + kBlockRows - 1) / kBlockRows;
  const size_t blocks = std::max<size_t>(1, row_blocks);  // no rows: one block of zeros
  const std::string& source = norm_source(op, in[0].dtype());
  Tensor partials = Tensor::empty({static_cast<int64_t>(blocks), static_cast<int64_t>(width)}, DType::F32,
                                        x.device());
  if (rows == 0) partials.fill_zero();
  Launch(x, source, "rms_norm_backward")
      .tensor(in[0]).tensor(x).tensor(in[2])
      .tensor(dres.defined() ? dres : x).value<cl_int>(dres.defined() ? 1 : 0)
      .tensor(out[0]).tensor(partials).value<cl_ulong>(rows).value<cl_ulong>(width).value<cl_float>(eps_of(attrs))
      .run(row_blocks * kRowThreads, kRowThreads);
  sum_blocks(partials, blocks, width, source, {out[1]});
}

void rms_norm_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  rms_norm_backward_rows("rms_norm_backward", in, Tensor(), out, attrs);
}

void rms_norm_backward_add(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  rms_norm_backward_rows("rms_norm_backward_add", in, in[3], out, attrs);
}

}  // namespace

void register_norms(Backend& backend) {
  backend.add_kernel("layernorm", DType::F32, layernorm);
  backend.add_kernel("layernorm_backward", DType::F32, layernorm_backward);
  backend.add_kernel("add_layernorm", DType::F32, add_layernorm);
  backend.add_kernel("layernorm_backward_add", DType::F32, layernorm_backward_add);
  backend.add_kernel("rms_norm", DType::F32, rms_norm);
  backend.add_kernel("rms_norm_backward", DType::F32, rms_norm_backward);
  backend.add_kernel("add_rms_norm", DType::F32, add_rms_norm);
  backend.add_kernel("rms_norm_backward_add", DType::F32, rms_norm_backward_add);
}

}  // namespace strata::opencl
