// Compares kernel outputs with the fp64 reference: error statistics, elements the kernel
// never wrote (still NaN from the poisoning), and -inf entries of LSE that must match.
#pragma once

#include <cstdint>
#include <span>

namespace flashjit::verify {

struct ErrorStats {
  double max_abs = 0;     // max |got - want|
  double max_rel = 0;     // max |got - want| / max(|want|, rel_floor)
  double rel_l2 = 0;      // ||got - want|| / ||want|| (0 when want is all zero)
  int64_t worst = -1;     // the first NaN / infinity mismatch, else the largest |got - want|
  int64_t nan = 0;        // NaN in got: unwritten (poisoned) or computed NaN
  int64_t inf_mismatch = 0;  // an infinity on one side only, or of different sign
  int64_t over_tolerance = 0;  // elements with |got - want| > atol + rtol * |want|
  int64_t count = 0;
};

struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

// Finite elements enter the error sums; an infinity must be matched exactly by the same
// infinity (LSE of a row that sees no key is -inf) and is otherwise counted, not summed.
ErrorStats compare(std::span<const float> got, std::span<const double> want, Tolerance tolerance,
                   double rel_floor = 1e-3);

inline bool all_within(const ErrorStats& stats) {
  return stats.nan == 0 && stats.inf_mismatch == 0 && stats.over_tolerance == 0;
}

}  // namespace flashjit::verify
