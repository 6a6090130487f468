#include "core/dtype.h"

#include <utility>

#include "core/error.h"

namespace strata {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F64: return 8;
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  fail("unknown dtype code {}", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F64: return "f64";
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType dtype : {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
    if (dtype_name(dtype) == name) return dtype;
  }
  // The spellings of training configs (fp32, as in precision.compute) and of PyTorch.
  static constexpr std::pair<std::string_view, DType> kAliases[] = {
      {"fp64", DType::F64},    {"fp32", DType::F32},    {"fp16", DType::F16},   {"float64", DType::F64},
      {"float32", DType::F32}, {"float16", DType::F16}, {"bfloat16", DType::BF16}};
  for (const auto& [alias, dtype] : kAliases) {
    if (alias == name) return dtype;
  }
  fail("unknown dtype '{}' (expected f64, f32, bf16, f16, i32 or i64; fp32, fp16, float32, bfloat16 and the like "
       "are accepted too)",
       name);
}

bool is_floating(DType dtype) {
  return dtype == DType::F64 || dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16;
}

float fp16_to_float(fp16 value) {
  uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  uint32_t exponent = (value.bits >> 10) & 0x1fu;
  uint32_t mantissa = value.bits & 0x3ffu;
  uint32_t word;
  if (exponent == 0) {
    if (mantissa == 0) {
      word = sign;
    } else {  // subnormal: renormalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      word = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    word = sign | 0x7f800000u | (mantissa << 13);
  } else {
    word = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float result;
  std::memcpy(&result, &word, sizeof(result));
  return result;
}

fp16 float_to_fp16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  uint16_t sign = static_cast<uint16_t>((word >> 16) & 0x8000u);
  uint32_t abs_word = word & 0x7fffffffu;
  if (abs_word >= 0x7f800000u) {  // inf or nan
    uint16_t nan_bit = abs_word > 0x7f800000u ? 0x200u : 0;
    return fp16{static_cast<uint16_t>(sign | 0x7c00u | nan_bit)};
  }
  if (abs_word >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    return fp16{static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (abs_word < 0x38800000u) {  // below the smallest normal: subnormal or zero
    float abs_value;
    std::memcpy(&abs_value, &abs_word, sizeof(abs_value));
    // 2^-24 is the subnormal step; adding 0.5 (as 2^-1 scaled) rounds to nearest even
    // via the FPU's own rounding of the addition.
    float shifted = abs_value + 0.5f;
    uint32_t shifted_word;
    std::memcpy(&shifted_word, &shifted, sizeof(shifted_word));
    return fp16{static_cast<uint16_t>(sign | (shifted_word - 0x3f000000u))};
  }
  uint32_t mantissa_odd = (abs_word >> 13) & 1u;
  abs_word += 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round
  return fp16{static_cast<uint16_t>(sign | (abs_word >> 13))};
}

}  // namespace strata
