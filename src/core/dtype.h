#pragma once
// Element types and the scalar conversions every backend shares.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace strata {

enum class DType : uint8_t { F64, F32, BF16, F16, I32, I64 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);        // "f32", "bf16", ...
// "f32", "bf16", ... as dtype_name prints them, or fp32 / fp16 / float32 /
// bfloat16 and the like (one spelling printed, every common one accepted).
DType parse_dtype(std::string_view name);        // throws Error naming the value
bool is_floating(DType dtype);

// bf16 keeps the top 16 bits of an IEEE float; rounding is to nearest even,
// NaN stays NaN (quiet).
struct bf16 {
  uint16_t bits = 0;
};
// IEEE 754 binary16.
struct fp16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 value) {
  uint32_t word = static_cast<uint32_t>(value.bits) << 16;
  float result;
  std::memcpy(&result, &word, sizeof(result));
  return result;
}

inline bf16 float_to_bf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if ((word & 0x7f800000u) == 0x7f800000u && (word & 0x007fffffu) != 0) {
    return bf16{static_cast<uint16_t>((word >> 16) | 0x0040u)};
  }
  uint32_t rounding = 0x7fffu + ((word >> 16) & 1u);
  return bf16{static_cast<uint16_t>((word + rounding) >> 16)};
}

float fp16_to_float(fp16 value);
fp16 float_to_fp16(float value);

// Generic load/store used by dtype-templated reference code.
template <typename T>
inline double to_double(T value) {
  return static_cast<double>(value);
}
template <>
inline double to_double<bf16>(bf16 value) {
  return bf16_to_float(value);
}
template <>
inline double to_double<fp16>(fp16 value) {
  return fp16_to_float(value);
}

template <typename T>
inline T from_double(double value) {
  return static_cast<T>(value);
}
template <>
inline bf16 from_double<bf16>(double value) {
  return float_to_bf16(static_cast<float>(value));
}
template <>
inline fp16 from_double<fp16>(double value) {
  return float_to_fp16(static_cast<float>(value));
}

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<double>() { return DType::F64; }
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<bf16>() { return DType::BF16; }
template <>
constexpr DType dtype_of<fp16>() { return DType::F16; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::I64; }

}  // namespace strata
