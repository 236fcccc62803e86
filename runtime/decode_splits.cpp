#include "runtime/decode_splits.h"

#include <algorithm>

namespace flashjit::rt {

int decode_kv_splits(long long ctas, int key_tiles, int slots) {
  if (ctas <= 0 || key_tiles <= 1 || slots <= 0) return 1;
  const auto cost = [&](int splits) {
    const long long waves = (ctas * splits + slots - 1) / slots;
    const long long tiles = (key_tiles + splits - 1) / splits;
    return waves * (tiles + kSplitOverheadTiles) + (splits > 1 ? kSplitOverheadTiles : 0);
  };
  int best = 1;
  long long best_cost = cost(1);
  for (int splits = 2; splits <= std::min(kMaxKvSplits, key_tiles); ++splits) {
    const long long c = cost(splits);
    if (c < best_cost) {
      best = splits;
      best_cost = c;
    }
  }
  return best;
}

}  // namespace flashjit::rt
