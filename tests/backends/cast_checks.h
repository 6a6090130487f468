#pragma once
// The cast checks that the cpu tests (cpu_bf16_test.cpp) and the opencl tests
// (opencl_elementwise_test.cpp) share: a backend's casts between f32, bf16,
// f16 and f64 give ref's bits, on special values and on random ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_test_util.h"

namespace strata::testing {

inline Tensor f32_from_bits(const std::vector<uint32_t>& words) {
  Tensor tensor = Tensor::empty({static_cast<int64_t>(words.size())}, DType::F32);
  std::memcpy(tensor.raw(), words.data(), words.size() * sizeof(uint32_t));
  return tensor;
}

// `backend`'s cast of x to `to` has ref's bits everywhere except NaNs, which
// must stay NaN (F16C may keep more of a NaN's payload than ref does).
inline void expect_same_cast(const std::string& backend, const Tensor& x, DType to, const std::string& what) {
  const Attrs attrs{{"dtype", std::string(dtype_name(to))}};
  const Tensor got = run_on(backend, "cast", {x}, attrs)[0];
  const Tensor ref = run_on("ref", "cast", {x}, attrs)[0];
  ASSERT_EQ(got.dtype(), to) << what;
  const Tensor got_wide = got.to(DType::F64), ref_wide = ref.to(DType::F64);
  const size_t size = dtype_size(to);
  auto* g_bytes = static_cast<const unsigned char*>(got.raw());
  auto* r_bytes = static_cast<const unsigned char*>(ref.raw());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double g = got_wide.data<double>()[i], r = ref_wide.data<double>()[i];
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(g)) << what << ": element " << i << " should stay NaN";
    } else {
      EXPECT_EQ(std::memcmp(g_bytes + i * size, r_bytes + i * size, size), 0)
          << what << ": element " << i << " is " << g << ", ref " << r;
    }
  }
}

// Special f32 values cast to every float dtype on `backend`, and those casts
// cast on again (from ref's, so each step is judged alone).
inline void expect_casts_of_special_values_match_ref(const std::string& backend) {
  const Tensor specials = f32_from_bits({
      0x3f808000u,  // 1 + 2^-8: a tie, rounds to even (down) in bf16
      0x3f818000u,  // a tie that rounds up
      0x3f808001u,  // just above a tie
      0x7f7fffffu,  // the largest float: rounds to inf in bf16 and f16
      0x00000001u,  // the smallest subnormal
      0x00400000u,  // a subnormal bf16 keeps
      0x80000000u,  // -0
      0x807fffffu,  // the largest negative subnormal (f64's exponent from its top bit)
      0x7f800000u,  // inf
      0xff800000u,  // -inf
      0x7fc00000u,  // quiet NaN
      0x7f800001u,  // signalling NaN: must not become inf
      0x477fe000u,  // 65504, the largest f16
      0x477ff000u,  // a tie between 65504 and f16 overflow
      0x33800000u,  // 2^-24, the smallest f16 subnormal
      0x33000000u,  // 2^-25: a tie, to even (0) in f16
      0x33c00000u,  // 1.5 * 2^-24: a tie, to even (2^-23) in f16
      0x38800000u,  // 2^-14, the smallest f16 normal
      0xc0490fdbu,  // -pi
  });
  for (DType to : {DType::BF16, DType::F16, DType::F64, DType::F32}) {
    expect_same_cast(backend, specials, to, "f32 specials to " + std::string(dtype_name(to)));
    if (to == DType::F64) continue;  // f64 inputs are ref's
    const Tensor narrowed = run_on("ref", "cast", {specials}, {{"dtype", std::string(dtype_name(to))}})[0];
    for (DType back : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
      expect_same_cast(backend, narrowed, back,
                       std::string(dtype_name(to)) + " specials to " + std::string(dtype_name(back)));
    }
  }
}

// 40007 random values from `seed` (several parallel chunks and a tail that is
// not a multiple of a vector or a work-group) cast between the float dtypes on
// `backend`; scale 1e3 spreads exponents into f16's overflow, 1e-5 into its
// subnormals.
inline void expect_casts_of_random_values_match_ref(const std::string& backend, uint64_t seed) {
  for (float scale : {1.0f, 1e3f, 1e-5f}) {
    const Tensor x = random_f32({40007}, seed, scale);
    for (DType to : {DType::BF16, DType::F16, DType::F64}) {
      expect_same_cast(backend, x, to, "random f32 to " + std::string(dtype_name(to)));
    }
    for (DType from : {DType::BF16, DType::F16}) {
      const Tensor narrow = x.to(from);
      for (DType to : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
        expect_same_cast(backend, narrow, to, std::string(dtype_name(from)) + " to " + std::string(dtype_name(to)));
      }
    }
  }
}

}  // namespace strata::testing
