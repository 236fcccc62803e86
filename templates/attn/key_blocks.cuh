// The key tiles a CTA visits, shared by both forward kernels so that every mask walks the
// same sequence on either.
//
// A CTA's main loop has "steps": the blocks of a KeyBlockRuns in visiting order,
// kTilesPerBlock key tiles of kBlockN keys each (step s is tile s % kTilesPerBlock of block
// s / kTilesPerBlock). Blocks are mask blocks for block masks (block_sparse, pattern) and
// key tiles otherwise. A step whose tile starts at or past the CTA's key end (a listed block
// that causal or the sequence end hides, or the tail of the last block) is skipped: the sm80
// kernel keeps its place in the cp.async pipeline and computes nothing; the sm90 kernel walks
// only the visited steps (KeyTileWalk), so its mbarrier ring and ping-pong never see a gap.
//
// Config: kBlockN, kBlockSparse, kPattern, kMaskBlockQ, kMaskBlockK, kPatternWindow,
// kPatternStride, kPatternGlobal.
#pragma once

#include "mask.cuh"
#include "params.cuh"

namespace fj {

// The key blocks one CTA visits, in visiting order: the blocks `first`, `first + stride`, ...
// (count1 of them), then `second`, `second + 1`, ... (count2), or with a run-time layout the
// count1 blocks of `list`.
struct KeyBlockRuns {
  int first = 0, stride = 1, count1 = 0;
  int second = 0, count2 = 0;
  const int* list = nullptr;

  __device__ __forceinline__ int count() const { return count1 + count2; }
  __device__ __forceinline__ int block(int nth) const {
    if (list != nullptr) return __ldg(list + nth);
    return nth < count1 ? first + nth * stride : second + (nth - count1);
  }
};

// The key blocks that query block qb sees under pattern P, among the key blocks [0, blocks).
template <class Cfg>
__device__ __forceinline__ KeyBlockRuns pattern_runs(int qb, int blocks) {
  KeyBlockRuns runs;
  if constexpr (Cfg::kPattern == Pattern::kLocal) {
    runs.first = max(0, qb - Cfg::kPatternWindow);
    runs.count1 = max(0, min(blocks, qb + Cfg::kPatternWindow + 1) - runs.first);
  } else if constexpr (Cfg::kPattern == Pattern::kStrided) {
    runs.first = qb % Cfg::kPatternStride;
    runs.stride = Cfg::kPatternStride;
    runs.count1 = runs.first < blocks ? (blocks - runs.first + runs.stride - 1) / runs.stride : 0;
  } else if constexpr (Cfg::kPattern == Pattern::kGlobalLocal) {
    if (qb < Cfg::kPatternGlobal) {  // a global query block sees every key block
      runs.count1 = blocks;
    } else {  // the global key blocks, then the band right of them
      runs.count1 = min(Cfg::kPatternGlobal, blocks);
      runs.second = max(Cfg::kPatternGlobal, qb - Cfg::kPatternWindow);
      runs.count2 = max(0, min(blocks, qb + Cfg::kPatternWindow + 1) - runs.second);
    }
  }
  return runs;
}

// Does query block qb see key block kb under pattern P? The membership test of pattern_runs,
// for the backward, which walks the query blocks of one key block.
template <class Cfg>
__device__ __forceinline__ bool pattern_sees(int qb, int kb) {
  if constexpr (Cfg::kPattern == Pattern::kLocal) {
    return abs(qb - kb) <= Cfg::kPatternWindow;
  } else if constexpr (Cfg::kPattern == Pattern::kStrided) {
    return (qb - kb) % Cfg::kPatternStride == 0;
  } else if constexpr (Cfg::kPattern == Pattern::kGlobalLocal) {
    return qb < Cfg::kPatternGlobal || kb < Cfg::kPatternGlobal ||
           abs(qb - kb) <= Cfg::kPatternWindow;
  } else {
    return true;
  }
}

// Does query block qb of (batch, head) see key block kb under the spec's block mask (true
// without one)? A run-time layout's list is searched by the 32 lanes together: call it with
// the whole warp; every lane gets the answer.
template <class Cfg>
__device__ __forceinline__ bool block_mask_sees(const BlockSparseLayout& layout, int batch,
                                                int head, int qb, int kb, int lane) {
  if constexpr (Cfg::kBlockSparse) {
    const long long entry = batch * layout.batch_stride + head * layout.head_stride + qb;
    const int count = min(max(layout.counts[entry], 0), layout.max_blocks);
    const int* list = layout.indices + entry * layout.max_blocks;
    bool found = false;
    for (int nth = lane; nth < count; nth += 32) found |= __ldg(list + nth) == kb;
    return __any_sync(0xffffffffu, found);
  } else {
    return pattern_sees<Cfg>(qb, kb);
  }
}

template <class Cfg>
struct KeyTiling {
  static constexpr bool kBlockMask = Cfg::kBlockSparse || Cfg::kPattern != Pattern::kNone;
  // The generator makes block_m divide the mask's query block and block_n its key block, so
  // a CTA's rows lie in one query block and a visited tile needs no mask of its own (only
  // the sequence end and the causal cut inside tiles).
  static constexpr int kTilesPerBlock = kBlockMask ? Cfg::kMaskBlockK / Cfg::kBlockN : 1;
  static constexpr int kBlockKeys = kTilesPerBlock * Cfg::kBlockN;
  static_assert(!kBlockMask || (Cfg::kMaskBlockQ % Cfg::kBlockM == 0 &&
                                Cfg::kMaskBlockK % Cfg::kBlockN == 0),
                "tiles lie inside mask blocks");
};

// One CTA's steps: its blocks and the end of the keys its rows can see.
struct KeySteps {
  KeyBlockRuns runs;
  int key_blocks = 0;  // blocks holding a key below key_end; listed blocks from here are hidden
  int key_end = 0;
};

// The steps of the CTA whose rows start at m0 (within its sequence) and see `keys`; `layout`
// is read only under kBlockSparse.
template <class Cfg>
__device__ __forceinline__ KeySteps key_steps(const BlockSparseLayout& layout, int batch,
                                              int head, int m0, KeyRange keys) {
  using T = KeyTiling<Cfg>;
  KeySteps ks;
  ks.key_end = keys.end;
  ks.key_blocks = keys.end > 0 ? (keys.end + T::kBlockKeys - 1) / T::kBlockKeys : 0;
  if constexpr (Cfg::kBlockSparse) {
    const long long entry =
        batch * layout.batch_stride + head * layout.head_stride + m0 / Cfg::kMaskBlockQ;
    ks.runs.count1 = min(max(layout.counts[entry], 0), layout.max_blocks);
    ks.runs.list = layout.indices + entry * layout.max_blocks;
  } else if constexpr (Cfg::kPattern != Pattern::kNone) {
    ks.runs = pattern_runs<Cfg>(m0 / Cfg::kMaskBlockQ, ks.key_blocks);
  } else {
    ks.runs.first = keys.begin / Cfg::kBlockN;
    ks.runs.count1 = max(0, ks.key_blocks - ks.runs.first);
  }
  return ks;
}

template <class Cfg>
__device__ __forceinline__ int step_count(const KeySteps& ks) {
  return ks.runs.count() * KeyTiling<Cfg>::kTilesPerBlock;
}

// The first key of step `step`, or -1 when the step is skipped. Without a block mask every
// step is a tile of the band: nothing to check (and no register kept for the check).
template <class Cfg>
__device__ __forceinline__ int step_key0(const KeySteps& ks, int step) {
  using T = KeyTiling<Cfg>;
  if constexpr (!T::kBlockMask) {
    return (ks.runs.first + step) * Cfg::kBlockN;
  } else {
    const int block = ks.runs.block(step / T::kTilesPerBlock);
    if (block < 0 || block >= ks.key_blocks) return -1;
    const int key0 = (block * T::kTilesPerBlock + step % T::kTilesPerBlock) * Cfg::kBlockN;
    return key0 < ks.key_end ? key0 : -1;
  }
}

// How many steps load a tile (step_key0 >= 0). The 32 lanes of a warp count together, each
// a share of the blocks (a run-time list is read in parallel, not one entry after another),
// and every lane gets the total: call it with the whole warp.
template <class Cfg>
__device__ __forceinline__ int visited_steps(const KeySteps& ks, int lane) {
  using T = KeyTiling<Cfg>;
  if constexpr (!T::kBlockMask) {
    return step_count<Cfg>(ks);
  } else {
    int tiles = 0;
    for (int nth = lane; nth < ks.runs.count(); nth += 32) {
      const int block = ks.runs.block(nth);
      // Only the block holding key_end can be cut: its tiles from key_end on are skipped.
      if (block >= 0 && block < ks.key_blocks)
        tiles += min(T::kTilesPerBlock,
                     (ks.key_end - block * T::kBlockKeys + Cfg::kBlockN - 1) / Cfg::kBlockN);
    }
    return __reduce_add_sync(0xffffffffu, tiles);
  }
}

// Walks the visited steps in order: the i-th call of next() gives the first key of the i-th
// tile that step_key0 does not skip. Call it at most visited_steps times.
struct KeyTileWalk {
  int step = -1;

  template <class Cfg>
  __device__ __forceinline__ int next(const KeySteps& ks) {
    if constexpr (!KeyTiling<Cfg>::kBlockMask) {
      return step_key0<Cfg>(ks, ++step);
    } else {
      int key0;
      do key0 = step_key0<Cfg>(ks, ++step);
      while (key0 < 0);
      return key0;
    }
  }
};

}  // namespace fj
