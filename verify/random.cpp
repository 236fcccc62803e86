#include "verify/random.h"

#include "verify/half.h"

namespace flashjit::verify {

namespace {

uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

RandomInputs::RandomInputs(std::optional<uint64_t> seed, Distribution distribution)
    : seed_(seed ? *seed : fresh_seed()), distribution_(distribution), engine_(seed_) {}

float RandomInputs::next(DType dtype) {
  const float value =
      distribution_ == Distribution::Normal ? normal_(engine_) : uniform_(engine_);
  return round_to(dtype, value);
}

void RandomInputs::fill(DType dtype, std::span<uint16_t> out) {
  for (uint16_t& bits : out) bits = encode(dtype, next(dtype));
}

}  // namespace flashjit::verify
