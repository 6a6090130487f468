#pragma once
// OpenCL C shared by the kernel programs that reduce rows in work-groups (opencl_norms.cpp,
// opencl_vocab.cpp), prepended to their source text so that they share one copy.

namespace strata::opencl {

// Strict f32 (no contraction into fma: the cpu kernels' roundings), `wide` (f64 where the device
// has it, else f32) for sums that must not drift, and group_sum over a work-group of ROW_THREADS
// work-items, which the program defines before this prelude.
inline constexpr const char* kRowReductionPrelude = R"CLC(
#pragma OPENCL FP_CONTRACT OFF
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double wide;
#else
typedef float wide;
#endif

// The sum of every work-item's `value`, added in a fixed tree order; every work-item gets it.
float group_sum(float value, __local float* scratch) {
  const uint lid = get_local_id(0);
  scratch[lid] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint half_size = ROW_THREADS / 2; half_size > 0; half_size /= 2) {
    if (lid < half_size) scratch[lid] += scratch[lid + half_size];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float total = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);  // before the next call overwrites scratch
  return total;
}
)CLC";

}  // namespace strata::opencl
