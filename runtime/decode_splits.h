// How many splits decode cuts each (batch, kv head)'s keys into (Flash-Decoding): enough
// CTAs to fill the GPU, no more than pays for the combine; or the count the caller or the tune
// DB gives, within what the call allows.
#pragma once

#include <string>

namespace flashjit::rt {

// The most splits a call takes (the combine kernel's weights hold this many a row).
inline constexpr int kMaxKvSplits = 128;
// Key tiles a split costs beyond its own (the prologue, the warps' merge, the partial
// stores), in the time model below.
inline constexpr int kSplitOverheadTiles = 2;
// The combine's pass reads every split's partial row: key tiles it costs a split, in the
// model below (fitted to `flashjit tune --decode` timings on an H100, bench/NOTES.md entry 46).
inline constexpr double kCombineTilesPerSplit = 0.2;
// A call splits only where the model's best count beats one split by more than this fraction:
// the model leaves out the partials' traffic, and where the unsplit grid fills the GPU its
// rounds of readers are not the steps it counts (CTAs end at different times).
inline constexpr double kSplitMinGain = 0.03;

// The splits of `key_tiles` key tiles for `ctas` CTAs of one split each, on a GPU where
// `readers` CTAs read the cache at once at full speed (decode_kv_split_range: one a
// multiprocessor, or as many as it holds where a second adds speed). The count that
// minimises ceil(CTAs / readers) x (tiles a split + kSplitOverheadTiles), plus the combine's
// pass for more than one (kSplitOverheadTiles + kCombineTilesPerSplit a split), the fewest of
// equal ones; 1 where that is not kSplitMinGain faster than one split, or there is one tile.
int decode_kv_splits(long long ctas, int key_tiles, int readers);

// One call's split counts: the heuristic's, and the most it allows (kMaxKvSplits, its key
// tiles, the room left in the grid's z).
struct KvSplitRange {
  int heuristic = 1;
  int most = 1;
};

enum class KvSplitSource { Caller, TuneDb, Heuristic };

struct KvSplitChoice {
  int splits = 1;
  KvSplitSource source = KvSplitSource::Heuristic;
  int asked = 1;  // the count before it was cut to KvSplitRange::most
};

// The caller's count (`requested`, ForwardArgs::kv_splits) when it is > 0, else the tune DB's
// (`tuned`, 0 for none), else the heuristic's; a count above range.most is cut to it.
KvSplitChoice choose_kv_splits(const KvSplitRange& range, int requested, int tuned);

// For FLASHJIT_VERBOSE: "24 key splits (tuned: <note>)", "10 key splits (the call's
// kv_splits, cut from 64 to the 10 the call allows)"; `note` says what the tune DB held.
std::string describe(const KvSplitChoice& choice, const std::string& note);

}  // namespace flashjit::rt
