// sum_to, sum_squares and square_sum_exact on an OpenCL device, deterministic without atomics: each
// work-item sums a fixed slice in a fixed order, and a second kernel adds the slices' results in
// slice order. sum_to and sum_squares sum in f32 with Neumaier's compensation, which keeps them
// within an ulp or two of the cpu's f64 sums on any device (fp64 is optional in OpenCL and slow on
// most GPUs). square_sum_exact adds integers, so its words are the cpu's and ref's exactly; it reads f32
// or bf16.
#include <algorithm>

#include "backends/opencl/launch.h"
#include "backends/opencl/opencl_ops.h"
#include "core/exact_square_sum.h"

namespace strata::opencl {

namespace {

constexpr size_t kGroup = 64;
// sum_to's slices: at least kMinRowsPerBlock rows, and at most kMaxBlocks of them per column.
constexpr int64_t kMinRowsPerBlock = 256;
constexpr int64_t kMaxBlocks = 4096;
// sum_squares' slices: element p of every kSquareSlices.
constexpr int64_t kSquareSlices = 4096;
// square_sum_exact's work-groups: enough that each work-item takes at least kGroup values, at most kMaxExactGroups.
constexpr int64_t kMaxExactGroups = 1024;
constexpr int64_t kExactRecord = 22;  // the kernel's RECORD: 20 digits, then the infinities and NaNs
static_assert(ExactSquareSum::kWords == 512, "square_sum_words writes 512 words");

const std::string kSource = R"CLC(
#pragma OPENCL FP_CONTRACT OFF

// Neumaier's compensated sum: `sum` plus `compensation` holds the running total.
void add_compensated(float* sum, float* compensation, float value) {
  float total = *sum + value;
  *compensation += fabs(*sum) >= fabs(value) ? (*sum - total) + value : (value - total) + *sum;
  *sum = total;
}

// partial[block, column] = sum of x[row, column] over the block's rows [block * rows_per_block, ...).
__kernel void sum_rows(__global const float* x, ulong x_off, __global float* partial, ulong partial_off,
                       ulong width, ulong rows, ulong rows_per_block) {
  size_t column = get_global_id(0);
  size_t block = get_global_id(1);
  if (column >= width) return;
  ulong begin = block * rows_per_block;
  ulong end = min(rows, begin + rows_per_block);
  float sum = 0.0f, compensation = 0.0f;
  for (ulong row = begin; row < end; ++row) add_compensated(&sum, &compensation, x[x_off + row * width + column]);
  partial[partial_off + block * width + column] = sum + compensation;
}

// out[column] = sum over blocks of partial[block, column], in block order.
__kernel void sum_blocks(__global const float* partial, ulong partial_off, __global float* out, ulong out_off,
                         ulong width, ulong blocks) {
  size_t column = get_global_id(0);
  if (column >= width) return;
  float sum = 0.0f, compensation = 0.0f;
  for (ulong block = 0; block < blocks; ++block) {
    add_compensated(&sum, &compensation, partial[partial_off + block * width + column]);
  }
  out[out_off + column] = sum + compensation;
}

// partial[slice] = sum of x[i]^2 over i = slice, slice + slices, ... (adjacent work-items read adjacent values).
__kernel void sum_squares_slices(__global const float* x, ulong x_off, __global float* partial, ulong partial_off,
                                 ulong n, ulong slices) {
  size_t slice = get_global_id(0);
  if (slice >= slices) return;
  float sum = 0.0f, compensation = 0.0f;
  for (ulong i = slice; i < n; i += slices) {
    float value = x[x_off + i];
    add_compensated(&sum, &compensation, value * value);
  }
  partial[partial_off + slice] = sum + compensation;
}

// square_sum_exact (core/exact_square_sum.h): an f32 is m 2^(e-150), its square the integer m^2 < 2^48 at
// bin e, which weighs 4^(max(e, 1) - 1) units of 2^-298. The sum is kept as one integer in those units,
// in DIGITS base-2^32 digits held in ulongs, so every digit takes 2^32 squares before it can overflow.
#define DIGITS 20
#define RECORD (DIGITS + 2)
#define GROUP 64

// partials[group] = the group's digits (each below GROUP * 2^32, not carried), infinities and NaNs.
// x holds f32 values, or bf16 ones (`bf16`: each the top half of its f32, read as such).
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void square_sum_partials(__global const uchar* x, ulong x_off, __global ulong* partials, ulong partials_off,
                         ulong n, uint bf16) {
  __local ulong records[GROUP * RECORD];
  ulong digits[DIGITS];
  for (int k = 0; k < DIGITS; ++k) digits[k] = 0;
  ulong infinities = 0, nans = 0;
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
    uint word = bf16 ? (uint)(((__global const ushort*)x)[x_off + i]) << 16 : ((__global const uint*)x)[x_off + i];
    uint exponent = (word >> 23) & 0xffu;
    uint mantissa = word & 0x7fffffu;
    if (exponent == 0xffu) {
      if (mantissa == 0u) ++infinities;
      else ++nans;
      continue;
    }
    ulong significand = mantissa | (exponent != 0u ? 0x800000u : 0u);
    ulong square = significand * significand;
    uint shift = 2u * (max(exponent, 1u) - 1u);
    uint digit = shift / 32u, offset = shift % 32u;
    ulong low = square << offset;  // bits 0..63 of the shifted square; the rest is square >> (64 - offset)
    digits[digit] += low & 0xffffffffUL;
    digits[digit + 1] += low >> 32;
    if (offset != 0u) digits[digit + 2] += square >> (64u - offset);
  }
  size_t item = get_local_id(0);
  ulong carry = 0;
  for (int k = 0; k < DIGITS; ++k) {
    ulong value = digits[k] + carry;
    records[item * RECORD + k] = value & 0xffffffffUL;
    carry = value >> 32;
  }
  records[item * RECORD + DIGITS] = infinities;
  records[item * RECORD + DIGITS + 1] = nans;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (item < RECORD) {
    ulong total = 0;
    for (int other = 0; other < GROUP; ++other) total += records[other * RECORD + item];
    partials[partials_off + get_group_id(0) * RECORD + item] = total;
  }
}

// The 64 bits of the carried digits from bit `position` on.
ulong bits_from(const ulong* digits, uint position) {
  uint digit = position / 32u, offset = position % 32u;
  ulong bits = digits[digit] >> offset;
  for (uint k = 1; k < 3u && digit + k < DIGITS; ++k) {
    uint shift = 32u * k - offset;
    if (shift < 64u) bits |= digits[digit + k] << shift;
  }
  return bits;
}

// One work-item: the groups' records summed and carried, written as ExactSquareSum::words(): base-4
// digits in bins 1..253, the rest (bits 506 up) in bin 254's two words, then the counts.
__kernel void square_sum_words(__global const ulong* partials, ulong partials_off, ulong groups,
                               __global long* bins, ulong bins_off) {
  if (get_global_id(0) != 0) return;
  ulong total[RECORD];
  for (int k = 0; k < RECORD; ++k) total[k] = 0;
  for (ulong group = 0; group < groups; ++group) {
    for (int k = 0; k < RECORD; ++k) total[k] += partials[partials_off + group * RECORD + k];
  }
  ulong carry = 0;
  for (int k = 0; k < DIGITS; ++k) {
    ulong value = total[k] + carry;
    total[k] = value & 0xffffffffUL;
    carry = value >> 32;
  }
  bins[bins_off] = 0;
  bins[bins_off + 1] = 0;
  for (uint bin = 1; bin < 254u; ++bin) {
    uint bit = 2u * (bin - 1u);
    bins[bins_off + 2 * bin] = (long)((total[bit / 32u] >> (bit % 32u)) & 3u);
    bins[bins_off + 2 * bin + 1] = 0;
  }
  bins[bins_off + 508] = (long)bits_from(total, 506u);
  bins[bins_off + 509] = (long)bits_from(total, 570u);
  bins[bins_off + 510] = (long)total[DIGITS];
  bins[bins_off + 511] = (long)total[DIGITS + 1];
}
)CLC";

int64_t ceil_div(int64_t value, int64_t divisor) { return (value + divisor - 1) / divisor; }

// Adds each column's partial sums, in block order, into out.
void sum_partials(const Tensor& partial, int64_t width, int64_t blocks, const Tensor& out) {
  Launch(out, kSource, "sum_blocks")
      .tensor(partial)
      .tensor(out)
      .value<cl_ulong>(static_cast<cl_ulong>(width))
      .value<cl_ulong>(static_cast<cl_ulong>(blocks))
      .run(static_cast<size_t>(width), kGroup);
}

void sum_to(const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& x = in[0];
  const int64_t width = out[0].numel();
  if (width == 0) return;
  const int64_t rows = x.numel() / width;
  const int64_t rows_per_block = std::max(kMinRowsPerBlock, ceil_div(rows, kMaxBlocks));
  const int64_t blocks = std::max<int64_t>(1, ceil_div(rows, rows_per_block));
  // One block sums straight into the output.
  const Tensor partial = blocks == 1 ? out[0] : Tensor::empty({blocks, width}, DType::F32, device_of(x));
  Launch(x, kSource, "sum_rows")
      .tensor(x)
      .tensor(partial)
      .value<cl_ulong>(static_cast<cl_ulong>(width))
      .value<cl_ulong>(static_cast<cl_ulong>(rows))
      .value<cl_ulong>(static_cast<cl_ulong>(rows_per_block))
      .run(static_cast<size_t>(width), static_cast<size_t>(blocks), kGroup, 1);
  if (blocks > 1) sum_partials(partial, width, blocks, out[0]);
}

void sum_squares(const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& x = in[0];
  const int64_t slices = std::clamp<int64_t>(x.numel(), 1, kSquareSlices);
  const Tensor partial = Tensor::empty({slices}, DType::F32, device_of(x));
  Launch(x, kSource, "sum_squares_slices")
      .tensor(x)
      .tensor(partial)
      .value<cl_ulong>(static_cast<cl_ulong>(x.numel()))
      .value<cl_ulong>(static_cast<cl_ulong>(slices))
      .run(static_cast<size_t>(slices), kGroup);
  sum_partials(partial, 1, slices, out[0]);
}

void square_sum_exact(const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& x = in[0];
  const int64_t groups = std::clamp<int64_t>(ceil_div(x.numel(), static_cast<int64_t>(kGroup * kGroup)), 1,
                                             kMaxExactGroups);
  const Tensor partials = Tensor::empty({groups * kExactRecord}, DType::I64, device_of(x));
  Launch(x, kSource, "square_sum_partials")
      .tensor(x)
      .tensor(partials)
      .value<cl_ulong>(static_cast<cl_ulong>(x.numel()))
      .value<cl_uint>(x.dtype() == DType::BF16 ? 1u : 0u)
      .run(static_cast<size_t>(groups) * kGroup, kGroup);
  Launch(out[0], kSource, "square_sum_words")
      .tensor(partials)
      .value<cl_ulong>(static_cast<cl_ulong>(groups))
      .tensor(out[0])
      .run(1, 1);
}

}  // namespace

void register_reductions(Backend& backend) {
  backend.add_kernel("sum_to", DType::F32, sum_to);
  backend.add_kernel("sum_squares", DType::F32, sum_squares);
  backend.add_kernel("square_sum_exact", DType::F32, square_sum_exact);
  backend.add_kernel("square_sum_exact", DType::BF16, square_sum_exact);  // bf16 gradients, kept narrow
}

}  // namespace strata::opencl
