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
  switch (distribution_) {
    case Distribution::Normal: return round_to(dtype, normal_(engine_));
    case Distribution::Uniform: return round_to(dtype, uniform_(engine_));
    case Distribution::Wide: return round_to(dtype, wide_(engine_));
  }
  return 0.f;
}

void RandomInputs::fill(DType dtype, std::span<uint16_t> out) {
  for (uint16_t& bits : out) bits = encode(dtype, next(dtype));
}

}  // namespace flashjit::verify
