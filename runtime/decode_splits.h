// How many splits decode cuts each (batch, kv head)'s keys into (Flash-Decoding): enough
// CTAs to fill the GPU, no more than pays for the combine.
#pragma once

namespace flashjit::rt {

// The most splits a call takes (the combine kernel's weights hold this many a row).
inline constexpr int kMaxKvSplits = 128;
// Key tiles a split costs beyond its own (the prologue, the warps' merge, the partial
// stores), in the time model below.
inline constexpr int kSplitOverheadTiles = 2;

// The splits of `key_tiles` key tiles for `ctas` CTAs of one split each, on a GPU that runs
// `slots` CTAs at once (multiprocessors x CTAs each): the count that minimises waves x (tiles
// a split + kSplitOverheadTiles), plus the combine's pass for more than one, the fewest among
// equals. 1 when the unsplit grid already fills the GPU or there is one tile.
int decode_kv_splits(long long ctas, int key_tiles, int slots);

}  // namespace flashjit::rt
