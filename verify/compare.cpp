#include "verify/compare.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace flashjit::verify {

ErrorStats compare(std::span<const float> got, std::span<const double> want, Tolerance tolerance,
                   double rel_floor) {
  if (got.size() != want.size())
    throw std::invalid_argument("verify::compare: got and want differ in size");
  ErrorStats stats;
  stats.count = static_cast<int64_t>(got.size());
  double diff_sq = 0, want_sq = 0;
  int64_t first_bad = -1, max_abs_at = -1;
  for (size_t n = 0; n < got.size(); ++n) {
    const double a = got[n];
    const double b = want[n];
    const auto mark_bad = [&] {
      if (first_bad < 0) first_bad = static_cast<int64_t>(n);
    };
    if (std::isnan(a)) {
      ++stats.nan;
      mark_bad();
      continue;
    }
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) {
        ++stats.inf_mismatch;
        mark_bad();
      }
      continue;
    }
    const double diff = std::abs(a - b);
    if (diff > stats.max_abs) {
      stats.max_abs = diff;
      max_abs_at = static_cast<int64_t>(n);
    }
    stats.max_rel = std::max(stats.max_rel, diff / std::max(std::abs(b), rel_floor));
    if (diff > tolerance.atol + tolerance.rtol * std::abs(b)) ++stats.over_tolerance;
    diff_sq += diff * diff;
    want_sq += b * b;
  }
  stats.worst = first_bad >= 0 ? first_bad : max_abs_at;
  stats.rel_l2 = want_sq > 0 ? std::sqrt(diff_sq / want_sq) : std::sqrt(diff_sq);
  return stats;
}

}  // namespace flashjit::verify
