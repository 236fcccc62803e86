#include "runtime/decode_splits.h"

#include <algorithm>

#include <fmt/format.h>

namespace flashjit::rt {

int decode_kv_splits(long long ctas, int key_tiles, int readers) {
  if (ctas <= 0 || key_tiles <= 1 || readers <= 0) return 1;
  const int most = std::min(kMaxKvSplits, key_tiles);
  auto cost = [&](int splits) {  // the model's time at `splits`
    const long long rounds = (ctas * splits + readers - 1) / readers;
    const long long tiles = (key_tiles + splits - 1) / splits;
    const double combine =
        splits > 1 ? kSplitOverheadTiles + kCombineTilesPerSplit * splits : 0.0;
    return static_cast<double>(rounds * (tiles + kSplitOverheadTiles)) + combine;
  };
  int best = 1;
  double best_cost = cost(1);
  const double unsplit_cost = best_cost;
  for (int splits = 2; splits <= most; ++splits)
    if (const double c = cost(splits); c < best_cost) {
      best = splits;
      best_cost = c;
    }
  return best_cost * (1 + kSplitMinGain) < unsplit_cost ? best : 1;
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
