#include "runtime/decode_splits.h"

#include <algorithm>
#include <array>
#include <limits>

#include <fmt/format.h>

namespace flashjit::rt {

int decode_kv_splits(long long ctas, int key_tiles, int readers) {
  if (ctas <= 0 || key_tiles <= 1 || readers <= 0) return 1;
  const int most = std::min(kMaxKvSplits, key_tiles);
  std::array<long long, kMaxKvSplits + 1> cost{};  // cost[s]: the model's time at s splits
  long long best_cost = std::numeric_limits<long long>::max();
  for (int splits = 1; splits <= most; ++splits) {
    const long long rounds = (ctas * splits + readers - 1) / readers;
    const long long tiles = (key_tiles + splits - 1) / splits;
    cost[splits] = rounds * (tiles + kSplitOverheadTiles) + (splits > 1 ? kSplitOverheadTiles : 0);
    best_cost = std::min(best_cost, cost[splits]);
  }
  for (int splits = 1; splits < most; ++splits)
    if (static_cast<double>(cost[splits]) <= static_cast<double>(best_cost) * (1 + kSplitMinGain))
      return splits;
  return most;
}

KvSplitChoice choose_kv_splits(const KvSplitRange& range, int requested, int tuned) {
  KvSplitChoice choice;
  if (requested > 0) {
    choice.source = KvSplitSource::Caller;
    choice.asked = requested;
  } else if (tuned > 0) {
    choice.source = KvSplitSource::TuneDb;
    choice.asked = tuned;
  } else {
    choice.asked = range.heuristic;
  }
  choice.splits = std::clamp(choice.asked, 1, std::max(range.most, 1));
  return choice;
}

std::string describe(const KvSplitChoice& choice, const std::string& note) {
  const std::string count =
      fmt::format("{} key split{}", choice.splits, choice.splits == 1 ? "" : "s");
  const std::string cut =
      choice.splits == choice.asked
          ? ""
          : fmt::format(", cut from {} to the {} the call allows", choice.asked, choice.splits);
  switch (choice.source) {
    case KvSplitSource::Caller: return fmt::format("{} (the call's kv_splits{})", count, cut);
    case KvSplitSource::TuneDb: return fmt::format("{} (tuned{}: {})", count, cut, note);
    case KvSplitSource::Heuristic: break;
  }
  return fmt::format("{} (heuristic{}: {})", count, cut, note);
}

}  // namespace flashjit::rt
