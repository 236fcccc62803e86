#include "verify/half.h"

#include <bit>
#include <cmath>

namespace flashjit::verify {

namespace {

// Rounds `value >> shift` to nearest, ties to even; `shift` >= 1.
uint32_t shift_round_even(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
}

}  // namespace

uint16_t float_to_half(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000)  // NaN: stay a (quiet) NaN, keep the top payload bits
    return sign | 0x7e00 | static_cast<uint16_t>((magnitude >> 13) & 0x3ff);
  if (magnitude >= 0x477ff000)  // >= 65520 (half-way past the largest half, 65504): inf
    return sign | 0x7c00;
  if (magnitude >= 0x38800000) {  // >= 2^-14: a normal half; rebias the exponent 127 -> 15
    return sign | static_cast<uint16_t>(shift_round_even(magnitude - (112u << 23), 13));
  }
  // A half subnormal counts units of 2^-24: value = mantissa * 2^(exponent - 150), so the
  // count is the 24-bit mantissa shifted right by 126 - exponent (>= 14 here).
  const int exponent = static_cast<int>(magnitude >> 23);
  const int shift = 126 - exponent;
  if (shift > 24) return sign;  // below 2^-25 (or zero): rounds to zero
  const uint32_t mantissa = (magnitude & 0x7fffff) | (exponent ? 0x800000u : 0u);
  // A carry into 0x400 correctly produces the smallest normal half.
  return sign | static_cast<uint16_t>(shift_round_even(mantissa, shift));
}

float half_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000 | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffff) > 0x7f800000)  // NaN: truncating could make it inf; force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  // bf16 is the top half of a float: round the low 16 bits away, ties to even. A carry
  // rolls into the exponent, which is right (up to inf for the largest floats).
  return static_cast<uint16_t>(shift_round_even(bits & 0x7fffffff, 16) | ((bits >> 16) & 0x8000));
}

float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t encode(DType dtype, float value) {
  return dtype == DType::F16 ? float_to_half(value) : float_to_bf16(value);
}

float decode(DType dtype, uint16_t bits) {
  return dtype == DType::F16 ? half_to_float(bits) : bf16_to_float(bits);
}

}  // namespace flashjit::verify
