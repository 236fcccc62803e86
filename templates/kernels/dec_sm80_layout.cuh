// The tiles of decode's split kernel: its shared memory (Q, the K/V ring, the paged keys'
// offsets, the merge) and the constants of a warp's share, in a file of their own because
// both the kernel's flow (kernels/dec_sm80.cuh) and its row layouts (dec_sm80_rows.cuh) read
// them.
#pragma once

#include "../tile/budgets.cuh"
#include "../tile/element.cuh"
#include "../tile/load.cuh"

namespace fj {

template <class Cfg>
struct DecSm80Layout {
  using Element = typename Cfg::Element;
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kWarpKeys = Cfg::kBlockN / Cfg::kWarps;      // keys a warp, a tile
  static constexpr int kQkSteps = Cfg::kDqkPad / Element::kMmaK;   // k steps of Q K^T
  static constexpr int kQkStride = budget::conflict_free_stride(Cfg::kDqkPad, Element::kBytes);
  static constexpr int kVStride = budget::conflict_free_stride(Cfg::kDvSlice, Element::kBytes);
  static constexpr int kQElems = Cfg::kBlockM * kQkStride;
  static constexpr int kKElems = Cfg::kBlockN * kQkStride;
  static constexpr int kVElems = Cfg::kBlockN * kVStride;
  static constexpr int kPageRowsPerThread = (Cfg::kBlockN + kThreads - 1) / kThreads;
  // Paged rows whose addresses a thread finds before their copies (tile/load.cuh).
  static constexpr int kPagedRowGroup = Cfg::kAlign != 16 ? 1 : Cfg::kDqkPad >= 256 ? 2 : 4;
  // Row steps of a K or V tile unrolled (tile/load.cuh). Head dims up to 128 copy a 64-key
  // tile in 8 steps; wider ones in 16, and unrolling all 16 of K and V took 255 registers
  // and spilled at V slices of 256, dense and paged (paged d256 runs 5% slower capped, but
  // spilled 8-16 bytes uncapped: bench/NOTES.md entry 26).
  static constexpr int kLoadUnroll = 8;
  // Tiles whole inside the cache copy 16-byte chunks without bounds or zero-fill
  // (tile/load.cuh's load_whole_tile and load_whole_rows): rows on 16 bytes, no padded
  // columns, and one chunk a thread a row step.
  static constexpr bool kWholeRows =
      Cfg::kAlign == 16 && Cfg::kHeadDimQk == Cfg::kDqkPad &&
      pow2_ceil(Cfg::kDqkPad / 8) <= kThreads && pow2_ceil(Cfg::kDvSlice / 8) <= kThreads;
  // How far (log2) a block's max may pass a row's running max before it moves: O's rescale
  // (a multiply per accumulator) was 14% of the kernel's instructions, and a warp skips it
  // for a tile where none of its rows' maxima moved, after the first tiles nearly always.
  static constexpr int kMaxSlack = 8;
  // The merge's fp32 rows: each warp's O, then each warp's row max and row sum.
  static constexpr int kMergeStride = budget::dec_sm80_merge_stride(Cfg::kDvSlice);
  static constexpr int kMergeOFloats = Cfg::kWarps * Cfg::kBlockM * kMergeStride;
  static constexpr int kSharedBytes =
      budget::dec_sm80_shared_bytes(Element::kBytes, Cfg::kDqkPad, Cfg::kDvSlice, Cfg::kBlockM,
                                    Cfg::kBlockN, Cfg::kWarps, Cfg::kStages);
  static_assert(kSharedBytes >= Element::kBytes * (kQElems + Cfg::kStages * (kKElems + kVElems)) +
                                   budget::dec_sm80_key_offsets_bytes(Cfg::kBlockN, Cfg::kStages),
                "the budget holds Q, the K/V ring and the paged keys' offsets");
  static_assert(Element::kBytes * (kQElems + Cfg::kStages * (kKElems + kVElems)) % 16 == 0,
                "the paged keys' offsets are 16-byte aligned");
  static_assert(kSharedBytes >= 4 * (kMergeOFloats + 2 * Cfg::kWarps * Cfg::kBlockM),
                "the budget holds the merge");

  static_assert(Cfg::kBlockM == 8 || Cfg::kBlockM % 16 == 0,
                "8 packed rows (one n8 tile) or whole m16 tiles of them");
  static_assert(kWarpKeys % 16 == 0, "each warp's keys are whole k16 steps");
  static_assert(Cfg::kDqkPad % 16 == 0 && Cfg::kDvSlice % 16 == 0, "padded head dims");
  static_assert(Cfg::kStages >= 2, "the pipeline needs two stages");
  static_assert(Element::kBytes == 2 && Element::kMmaK == 16,
                "the fragments below are ldmatrix's b16 and mma.sync's m16n8k16");
};

}  // namespace fj
