// Global -> shared copies of one tile of rows (a Q, K or V tile), asynchronous where the
// alignment allows it. Nothing outside the user's tensors is read: rows past the sequence end
// and columns past the head dim are zero-filled, so padded MMA tiles contribute nothing.
#pragma once

#include "../arch/sm80.cuh"

namespace fj {

__host__ __device__ constexpr int pow2_ceil(int x) { return x <= 1 ? 1 : 2 * pow2_ceil((x + 1) / 2); }

// Copies one chunk of up to ALIGN bytes; `valid` (0..ALIGN / sizeof(T)) elements are read,
// the rest of the chunk is zero-filled. cp.async copies 4, 8 or 16 bytes: a narrower chunk is
// one element, copied synchronously. L2_PREFETCH: cp_async's hint, for 16-byte chunks.
template <int ALIGN, bool L2_PREFETCH = false, class T>
__device__ __forceinline__ void copy_chunk(T* dst, const T* src, int valid) {
  if constexpr (ALIGN >= 4) {
    cp_async<ALIGN, L2_PREFETCH && ALIGN == 16>(dst, src, valid * static_cast<int>(sizeof(T)));
  } else {
    static_assert(ALIGN == sizeof(T), "a synchronous chunk is one element");
    *dst = valid > 0 ? *src : T(0);
  }
}

// Copies a ROWS x COLS tile of elements T (COLS a multiple of 16) into shared memory with a
// row stride of SMEM_STRIDE elements. Row r of the source starts at src + r * src_stride; only
// rows r < rows_valid and columns c < cols_valid are read. ALIGN is the byte alignment of
// every source row start (the generator proves it from the call's pointers and strides): 16,
// 8 and 4 use cp.async of that width; the size of one element falls back to synchronous
// copies.
//
// Each thread keeps one fixed column for the whole tile and steps down the rows, so its
// addresses are one base plus a constant stride per step: precomputing a separate address
// for every chunk would pin dozens of registers across the main loop. UNROLL caps how many
// 16-byte steps are unrolled: fully unrolled, ptxas keeps every step's address live at once
// (decode's 16 K and 16 V steps at d256 took 45 registers and spilled). L2_PREFETCH is
// cp_async's hint.
template <int ROWS, int COLS, int SMEM_STRIDE, int THREADS, int ALIGN, int UNROLL = 1 << 20,
          bool L2_PREFETCH = false, class T>
__device__ __forceinline__ void load_tile(T* smem, const T* src, long long src_stride,
                                          int rows_valid, int cols_valid, int tid) {
  constexpr int kVec = ALIGN / static_cast<int>(sizeof(T));  // elements per chunk
  constexpr int kSlots = pow2_ceil(COLS / kVec);  // chunk slots per row (a power of 2)
  if constexpr (kSlots <= THREADS) {
    constexpr int kRowsPerStep = THREADS / kSlots;
    constexpr int kSteps = (ROWS + kRowsPerStep - 1) / kRowsPerStep;
    const int col = (tid % kSlots) * kVec;
    if (col >= COLS) return;  // slot past the padded row: idle
    const int row0 = tid / kSlots;
    int valid = cols_valid - col;
    valid = valid < 0 ? 0 : (valid > kVec ? kVec : valid);
    // A running pointer: per-step offsets hoisted out of the main loop would each hold a
    // 64-bit register for the whole kernel.
    const long long step_stride = kRowsPerStep * src_stride;
    const T* from = src + row0 * src_stride + col;
    // Narrow copies need many steps; unrolling all of them would hold one address a step.
#pragma unroll(ALIGN == 16 ? (kSteps < UNROLL ? kSteps : UNROLL) : 4)
    for (int step = 0; step < kSteps; ++step) {
      const int row = row0 + step * kRowsPerStep;
      if (ROWS % kRowsPerStep != 0 && row >= ROWS) break;
      const bool in = row < rows_valid && valid > 0;
      copy_chunk<ALIGN, L2_PREFETCH>(smem + row * SMEM_STRIDE + col, in ? from : src,
                                     in ? valid : 0);
      from += step_stride;
    }
  } else {
    constexpr int kStepsPerRow = kSlots / THREADS;
#pragma unroll 1
    for (int row = 0; row < ROWS; ++row) {
#pragma unroll
      for (int step = 0; step < kStepsPerRow; ++step) {
        const int col = (step * THREADS + tid) * kVec;
        if (col >= COLS) break;
        int valid = row < rows_valid ? cols_valid - col : 0;
        valid = valid < 0 ? 0 : (valid > kVec ? kVec : valid);
        copy_chunk<ALIGN, L2_PREFETCH>(smem + row * SMEM_STRIDE + col,
                                       valid > 0 ? src + row * src_stride + col : src, valid);
      }
    }
  }
}

// load_tile for a tile known to lie whole inside the tensor (every row below rows_valid, every
// column below cols_valid, rows 16-byte aligned): the copies need neither bounds nor zero-fill.
template <int ROWS, int COLS, int SMEM_STRIDE, int THREADS, int UNROLL = 1 << 20,
          bool L2_PREFETCH = false, class T>
__device__ __forceinline__ void load_whole_tile(T* smem, const T* src, long long src_stride,
                                                int tid) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kSlots = pow2_ceil(COLS / kVec);
  // A thread copies kGroup chunks of a row, 128 bytes apart: eight lanes still cover each line
  // of a row in one copy, and the group's addresses are one pointer plus immediate offsets, so
  // a row step costs one 64-bit add for kGroup copies.
  constexpr int kGroup = kSlots > 8 ? kSlots / 8 : 1;
  constexpr int kLanesPerRow = kSlots / kGroup;
  static_assert(kLanesPerRow <= THREADS, "one chunk group a thread a row step");
  constexpr int kRowsPerStep = THREADS / kLanesPerRow;
  constexpr int kSteps = (ROWS + kRowsPerStep - 1) / kRowsPerStep;
  const int col = (tid % kLanesPerRow) * kVec;
  if (col >= COLS) return;
  const int row0 = tid / kLanesPerRow;
  const long long step_stride = kRowsPerStep * src_stride;
  const T* from = src + row0 * src_stride + col;
  // One shared address stepped by constants: they fold into the copies' immediate offsets.
  const u32 to = smem_u32(smem + row0 * SMEM_STRIDE + col);
  constexpr u32 kStepBytes = kRowsPerStep * SMEM_STRIDE * sizeof(T);
  constexpr int kGroupCols = kLanesPerRow * kVec;  // columns between a group's chunks
#pragma unroll(kSteps < UNROLL ? kSteps : UNROLL)
  for (int step = 0; step < kSteps; ++step) {
    const int row = row0 + step * kRowsPerStep;
    if (ROWS % kRowsPerStep != 0 && row >= ROWS) break;
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      // Rows of a chunk count that is not a power of two (d192: 24 of 32 slots) end mid-group.
      if (kGroup * kGroupCols > COLS && col + g * kGroupCols >= COLS) break;
      cp_async_16<L2_PREFETCH>(to + step * kStepBytes + g * kGroupCols * sizeof(T),
                               from + g * kGroupCols);
    }
    from += step_stride;
  }
}

// Walks the rows row0 + i * STEP below ROWS (i < ceil(ROWS / STEP)) in groups of GROUP:
// the group's row_at calls come before its copies, so the reads they make (a paged cache's
// table in shared memory) wait once a group instead of once a row. row_at is called with rows
// below ROWS only; copy(i, row, from) copies row `row` from row_at's `from`.
template <int ROWS, int STEP, int GROUP, int UNROLL, class RowAt, class Copy>
__device__ __forceinline__ void copy_row_groups(int row0, RowAt row_at, Copy copy) {
  constexpr int kRowSteps = (ROWS + STEP - 1) / STEP;
  constexpr int kGroups = (kRowSteps + GROUP - 1) / GROUP;
  constexpr int kUnrolledGroups = UNROLL / GROUP < 1 ? 1 : UNROLL / GROUP;
#pragma unroll(kGroups < kUnrolledGroups ? kGroups : kUnrolledGroups)
  for (int i0 = 0; i0 < kRowSteps; i0 += GROUP) {
    decltype(row_at(0)) from[GROUP];
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      const int row = row0 + (i0 + g) * STEP;
      from[g] = row_at(row < ROWS ? row : ROWS - 1);
    }
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      const int row = row0 + (i0 + g) * STEP;
      if (kRowSteps % GROUP != 0 && i0 + g >= kRowSteps) break;
      if (ROWS % STEP != 0 && row >= ROWS) break;
      copy(i0 + g, row, from[g]);
    }
  }
}

// load_rows for a tile whose rows all lie inside the tensor at full width (rows 16-byte
// aligned): no bounds, no zero-fill. GROUP and UNROLL as in load_rows.
template <int ROWS, int COLS, int SMEM_STRIDE, int THREADS, int GROUP = 1, int UNROLL = 1 << 20,
          class T, class RowAt>
__device__ __forceinline__ void load_whole_rows(T* smem, RowAt row_at, int tid) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kSlots = pow2_ceil(COLS / kVec);
  static_assert(kSlots <= THREADS, "one chunk a thread a row step");
  constexpr int kRowsPerStep = THREADS / kSlots;
  const int col = (tid % kSlots) * kVec;
  if (col >= COLS) return;
  const int row0 = tid / kSlots;
  const u32 to = smem_u32(smem + row0 * SMEM_STRIDE + col);
  constexpr u32 kStepBytes = kRowsPerStep * SMEM_STRIDE * sizeof(T);
  copy_row_groups<ROWS, kRowsPerStep, GROUP, UNROLL>(
      row0, row_at, [&](int i, int, const T* from) { cp_async_16(to + i * kStepBytes, from + col); });
}

// load_tile for rows that do not lie one stride apart (decode's packed GQA rows, a paged
// cache): row r of the source starts at row_at(r). With GROUP 1, row_at is called only for
// rows below rows_valid. With GROUP > 1, the addresses of GROUP rows are found before their
// copies, so the reads row_at makes (a paged cache's table in shared memory) wait once for
// the group instead of once a row; row_at is then called for rows past rows_valid too and must
// read nothing out of bounds for any r < ROWS (what it returns for them is not read). The
// zero-filled chunks name `fallback` (any address of the tensor). UNROLL caps the rows
// unrolled, as in load_tile.
template <int ROWS, int COLS, int SMEM_STRIDE, int THREADS, int ALIGN, int GROUP = 1,
          int UNROLL = 1 << 20, class T, class RowAt>
__device__ __forceinline__ void load_rows(T* smem, RowAt row_at, const T* fallback,
                                          int rows_valid, int cols_valid, int tid) {
  constexpr int kVec = ALIGN / static_cast<int>(sizeof(T));
  constexpr int kSlots = pow2_ceil(COLS / kVec);
  constexpr int kRowsPerStep = kSlots <= THREADS ? THREADS / kSlots : 1;
  constexpr int kColSteps = kSlots <= THREADS ? 1 : kSlots / THREADS;
  const int slot = kSlots <= THREADS ? tid % kSlots : tid;
  const int row0 = kSlots <= THREADS ? tid / kSlots : 0;
  auto copy_row = [&](int row, const T* from) {
    const bool row_in = row < rows_valid;
#pragma unroll
    for (int step = 0; step < kColSteps; ++step) {
      const int col = (step * THREADS + slot) * kVec;
      if (col >= COLS) break;
      int valid = row_in ? cols_valid - col : 0;
      valid = valid < 0 ? 0 : (valid > kVec ? kVec : valid);
      copy_chunk<ALIGN>(smem + row * SMEM_STRIDE + col, valid > 0 ? from + col : fallback, valid);
    }
  };
  if constexpr (GROUP == 1) {
#pragma unroll(ALIGN == 16 ? 4 : 1)
    for (int row = row0; row < ROWS; row += kRowsPerStep)
      copy_row(row, row < rows_valid ? row_at(row) : nullptr);
  } else {
    copy_row_groups<ROWS, kRowsPerStep, GROUP, UNROLL>(
        row0, row_at, [&](int, int row, const T* from) { copy_row(row, from); });
  }
}

}  // namespace fj
