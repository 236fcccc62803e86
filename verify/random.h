// Fresh random inputs for checks and benchmarks: a 64-bit Mersenne Twister seeded from
// std::random_device unless a seed is given (so a failing run can be repeated with --seed).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>

#include "flashjit/flashjit.h"

namespace flashjit::verify {

enum class Distribution {
  Normal,   // N(0, 1): scores of O(1) after the 1/sqrt(d) scale, like real activations
  Uniform,  // U(-1, 1)
  Wide,     // N(0, 9): scores of O(10), whose running max keeps moving by more than decode's slack
};

class RandomInputs {
 public:
  explicit RandomInputs(std::optional<uint64_t> seed = std::nullopt,
                        Distribution distribution = Distribution::Normal);

  uint64_t seed() const { return seed_; }
  // The next random number, rounded to `dtype` (returned as float).
  float next(DType dtype);
  // Fills `out` with random `dtype` bit patterns.
  void fill(DType dtype, std::span<uint16_t> out);

 private:
  uint64_t seed_;
  Distribution distribution_;
  std::mt19937_64 engine_;
  std::normal_distribution<float> normal_{0.f, 1.f};
  std::uniform_real_distribution<float> uniform_{-1.f, 1.f};
  std::normal_distribution<float> wide_{0.f, 3.f};
};

}  // namespace flashjit::verify
