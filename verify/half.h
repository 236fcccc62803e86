// fp16 and bf16 <-> float conversions for host data (round to nearest even), written out
// bit by bit so the verification code needs no CUDA headers and behaves the same everywhere.
#pragma once

#include <cstdint>

#include "flashjit/flashjit.h"

namespace flashjit::verify {

uint16_t float_to_half(float value);
float half_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);
float bf16_to_float(uint16_t bits);

// The same, picking the format from a spec dtype.
uint16_t encode(DType dtype, float value);
float decode(DType dtype, uint16_t bits);
// `value` rounded to the nearest `dtype` number, as a float.
inline float round_to(DType dtype, float value) { return decode(dtype, encode(dtype, value)); }

// A NaN bit pattern in both formats (sign set, all exponent and mantissa bits set): what
// outputs are poisoned with before a kernel runs, so an element it never writes is found.
inline constexpr uint16_t kPoison16 = 0xFFFF;

}  // namespace flashjit::verify
