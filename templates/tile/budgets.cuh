// Every kernel path's shared-memory size and register budget, written once: the generator's
// path rules (generator/*_path.cpp) and the device layout structs (templates/kernels/) both
// call these, and the emitted source still static_asserts that the two agree. This header is
// compiled by the host compiler and by NVRTC, so it holds only constexpr integer functions
// and enumerators (NVRTC's -default-device would emit a constexpr variable into every
// program as a global).
#pragma once

#if defined(__CUDACC__)
#define FJ_BUDGET __host__ __device__
#else
#define FJ_BUDGET
#endif

namespace fj {
namespace budget {

// A shared-memory row stride, in elements, of an odd number of 16-byte units: the 8 rows an
// ldmatrix reads then fall into 8 different groups of banks (no conflicts, any head dim).
FJ_BUDGET constexpr int conflict_free_stride(int cols, int element_bytes) {
  return (16 / element_bytes) * ((cols / (16 / element_bytes)) % 2 == 1
                                     ? cols / (16 / element_bytes)
                                     : cols / (16 / element_bytes) + 1);
}

// The columns of an n-column wgmma product that reach `valid` columns of a head dim (wgmma's N
// steps by 8 where a head dim pads to 16 or more; valid <= 0: all n).
FJ_BUDGET constexpr int live_cols(int n, int valid) {
  return valid >= n || valid <= 0 ? n : (valid + 7) / 8 * 8;
}

// ---- fwd_sm80: Q, then a kStages ring of K and V tiles.
FJ_BUDGET constexpr int fwd_sm80_shared_bytes(int element_bytes, int dqk_pad, int dv_slice,
                                              int block_m, int block_n, int stages) {
  return element_bytes * (block_m * conflict_free_stride(dqk_pad, element_bytes) +
                          stages * block_n *
                              (conflict_free_stride(dqk_pad, element_bytes) +
                               conflict_free_stride(dv_slice, element_bytes)));
}
// Accumulator registers a thread: each warp owns block_m / warps rows in m16 groups, and per
// group keeps dv_slice / 2 floats of O, block_n / 2 of S and block_n / 4 registers of P
// packed to 16 bits. Above kFwdSm80MaxAccumulatorRegisters ptxas spills (NVRTC 13.0, sm_80:
// 192, d96 m128 n64 w4, compiles clean; 208, d112 m128 n64 w4, spills 16 bytes).
FJ_BUDGET constexpr int fwd_sm80_accumulator_registers(int dv_slice, int block_m, int block_n,
                                                       int warps) {
  return block_m / (16 * warps) * (dv_slice / 2 + block_n / 2 + block_n / 4);
}
enum : int { kFwdSm80MaxAccumulatorRegisters = 200 };

// ---- fwd_sm90: rows cut into 128-byte panels (TMA's swizzle span): Q, a kStages ring of K
// and V, the mbarriers (q_full and q_empty a consumer, three a slot, 8 bytes each) and two
// 8-byte tile infos, plus 1024 bytes of slack that align the swizzled tiles.
enum : int { kPanelRowBytes = 128 };
FJ_BUDGET constexpr int panels(int cols, int element_bytes, int row_bytes = kPanelRowBytes) {
  return (cols * element_bytes + row_bytes - 1) / row_bytes;
}
FJ_BUDGET constexpr int align_1024(int bytes) { return (bytes + 1023) / 1024 * 1024; }
FJ_BUDGET constexpr int fwd_sm90_barrier_bytes(int stages) { return 8 * (4 + 3 * stages) + 16; }
FJ_BUDGET constexpr int fwd_sm90_shared_bytes(int element_bytes, int dqk_pad, int dv_slice,
                                              int block_m, int block_n, int stages) {
  return panels(dqk_pad, element_bytes) * block_m * kPanelRowBytes +
         stages * (panels(dqk_pad, element_bytes) + panels(dv_slice, element_bytes)) * block_n *
             kPanelRowBytes +
         fwd_sm90_barrier_bytes(stages) + 1024;
}
// A consumer thread's fp32 O (dv / 2) and S (block_n / 2) and P packed to 16 bits
// (block_n / 4), out of the 240 setmaxnreg gives it less descriptors, addresses, row
// statistics and loop state.
FJ_BUDGET constexpr int fwd_sm90_consumer_registers(int dv_slice, int block_n) {
  return dv_slice / 2 + block_n / 2 + block_n / 4;
}
enum : int { kFwdSm90MaxAccumulatorRegisters = 200 };

// ---- bwd_dkdv_sm80: K and V whole, then per stage the Q and dO tiles and the rows' LSE and
// D as floats. A thread holds block_m / 2 floats each of S^T and dP^T and half its dK and dV
// columns; ptxas needs about 90 registers beyond those (NVRTC 13.0, sm_90a: 192, d128 m64
// n128 w8, takes all 255 registers and spills), hence 176.
FJ_BUDGET constexpr int bwd_dkdv_sm80_shared_bytes(int element_bytes, int dqk_pad, int dv_pad,
                                                   int block_m, int block_n, int stages) {
  return element_bytes *
             (conflict_free_stride(dqk_pad, element_bytes) +
              conflict_free_stride(dv_pad, element_bytes)) *
             (block_n + stages * block_m) +
         stages * block_m * 2 * 4;
}
FJ_BUDGET constexpr int bwd_dkdv_sm80_accumulator_registers(int dk_slice, int dv_slice,
                                                            int block_m) {
  return block_m + (dk_slice + dv_slice) / 2;
}
enum : int { kBwdDkDvSm80MaxAccumulatorRegisters = 176 };

// ---- bwd_dkdv_sm90: K and V whole and a kStages ring of Q and dO tiles, in panels (128-byte
// rows, or 64 or 32: bwd_sm90_panel_row_bytes); per slot the rows' LSE and D as floats; the
// mbarriers (kv_full, then full and empty a slot). The kernel declares its shared memory
// 1024-byte aligned, so no slack aligns the swizzled tiles. A consumer thread holds half its dK
// and dV columns, block_m / 2 floats each of S^T and dP^T and block_m / 4 registers of them
// packed to 16 bits, out of the 240 setmaxnreg gives it.
// Q and dO tiles are as wide as every split's slice (the last split's may pass the head dim).
// Paired consumers (64 keys a CTA) add their P^T. The dQ-accumulating variant adds dq_bytes:
// two tiles of dS^T (block_n keys x block_m queries), each consumer's fp32 dQ tile staged
// for its bulk reduction and its mailbox to the dQ writer. At 64 query rows a step the
// consumers split the dQ columns (bwd_dkdv_sm90_dq_cols0: the first's share, inside one
// 64-column panel or whole panels); at 128 they split the rows, each a 64-row block of every
// column. The dQ accumulator lives while S^T and dP^T do not, beside both packed
// (bwd_dkdv_sm90_dq_step_registers).
enum : int { kBwdDkDvSm90DsBuffers = 2 };
// The rows of a block of the dQ accumulator (attn/dq_accum.cuh): dQ's wgmma M.
enum : int { kDqAccumTileRows = 64 };
// The ordered variant's counters a block of it (dq_turns): one a consumer's share.
enum : int { kDqTurnsPerBlock = 2 };
FJ_BUDGET constexpr bool bwd_dkdv_sm90_dq_rows_split(int block_m) {
  return block_m == 2 * kDqAccumTileRows;
}
FJ_BUDGET constexpr int bwd_dkdv_sm90_dq_cols0(int dk_slice) {
  return dk_slice <= 64 ? dk_slice / 2 : 64 * ((dk_slice + 64) / 128);
}
// The columns of consumer c's dQ product: its share, or all of them at 128 rows.
FJ_BUDGET constexpr int bwd_dkdv_sm90_dq_share_cols(int dk_slice, int block_m, int consumer) {
  const int cols0 = bwd_dkdv_sm90_dq_cols0(dk_slice);
  return bwd_dkdv_sm90_dq_rows_split(block_m) ? dk_slice
         : consumer == 0                      ? cols0
                                              : dk_slice - cols0;
}
// The widest dQ product a consumer runs.
FJ_BUDGET constexpr int bwd_dkdv_sm90_dq_cols(int dk_slice, int block_m) {
  const int cols0 = bwd_dkdv_sm90_dq_share_cols(dk_slice, block_m, 0);
  const int cols1 = bwd_dkdv_sm90_dq_share_cols(dk_slice, block_m, 1);
  return cols0 > cols1 ? cols0 : cols1;
}
// Consumer c's staged fp32 dQ tile.
FJ_BUDGET constexpr int bwd_dkdv_sm90_dq_stage_bytes(int dk_slice, int block_m, int consumer) {
  return kDqAccumTileRows * 4 * bwd_dkdv_sm90_dq_share_cols(dk_slice, block_m, consumer);
}
// The consumers hand each staged tile to the dQ writer (a producer lane) through a mailbox
// beside it: two mbarriers (staged, free), the tile's block, and in key-block order its
// counter and turn.
enum : int { kDqMailboxBytes = 48 };
// 64 keys a CTA pair the consumers on the same keys (templates/kernels/bwd_dkdv_sm90.cuh): the
// first hands its P^T (fp32, 64 keys x block_m queries) to the second through shared memory
// and two mbarriers, full and empty (16 bytes, keeping the dQ stages 16-byte aligned).
enum : int { kBwdDkDvSm90PairedKeys = 64 };
// 96 keys a CTA swap the dQ variant's products (templates/kernels/bwd_dkdv_swapped_sm90.cuh):
// each consumer owns 48 keys, holds S and dP with the queries as rows and dK^T and dV^T with
// the head dims as rows, and writes its P^T (16-bit, 48 keys x block_m queries) to shared
// memory beside its dS^T.
enum : int { kBwdDkDvSm90SwappedKeys = 96 };
FJ_BUDGET constexpr int bwd_dkdv_sm90_pt_bytes(int block_m, int block_n) {
  return block_n == kBwdDkDvSm90PairedKeys    ? block_n * block_m * 4 + 16
         : block_n == kBwdDkDvSm90SwappedKeys ? block_n * block_m * 2
                                              : 0;
}
// Swapped consumers at one ring slot (`stages` 1: d192, FlashAttention-3's stages there) keep Q
// and its rows in two slots and give dO one, and dS^T one buffer; dO then has its own full and
// empty mbarriers. Everywhere else Q and dO share `stages` slots.
FJ_BUDGET constexpr bool bwd_dkdv_sm90_one_do_slot(int block_n, int stages) {
  return block_n == kBwdDkDvSm90SwappedKeys && stages == 1;
}
FJ_BUDGET constexpr int bwd_dkdv_sm90_q_slots(int block_n, int stages) {
  return bwd_dkdv_sm90_one_do_slot(block_n, stages) ? 2 : stages;
}
FJ_BUDGET constexpr int bwd_dkdv_sm90_ds_buffers(int block_n, int stages) {
  return bwd_dkdv_sm90_one_do_slot(block_n, stages) ? 1 : kBwdDkDvSm90DsBuffers;
}
FJ_BUDGET constexpr int bwd_dkdv_sm90_dq_bytes(int element_bytes, int dk_slice, int block_m,
                                               int block_n, int stages) {
  return bwd_dkdv_sm90_ds_buffers(block_n, stages) * block_n * block_m * element_bytes +
         bwd_dkdv_sm90_dq_stage_bytes(dk_slice, block_m, 0) +
         bwd_dkdv_sm90_dq_stage_bytes(dk_slice, block_m, 1) + 2 * kDqMailboxBytes;
}
FJ_BUDGET constexpr int bwd_sm90_barrier_bytes(int stages) { return 8 * (1 + 2 * stages); }
// The dK/dV kernel's: kv_full, full and empty a Q slot, and dO's own pair where it has one slot.
FJ_BUDGET constexpr int bwd_dkdv_sm90_barrier_bytes(int block_n, int stages) {
  return bwd_sm90_barrier_bytes(bwd_dkdv_sm90_q_slots(block_n, stages)) +
         (bwd_dkdv_sm90_one_do_slot(block_n, stages) ? 16 : 0);
}
// The widest panel rows (TMA's swizzle spans: 128, 64 or 32 bytes) that both padded head
// dims fill without padding: a head dim of 80 columns takes 160 bytes a row in 32-byte
// panels, 256 in 128-byte ones. 16-bit elements' padded dims are multiples of 16 columns, so
// 32 always fits.
FJ_BUDGET constexpr int bwd_sm90_panel_row_bytes(int dqk_pad, int dv_pad, int element_bytes) {
  return (dqk_pad * element_bytes) % 128 == 0 && (dv_pad * element_bytes) % 128 == 0 ? 128
         : (dqk_pad * element_bytes) % 64 == 0 && (dv_pad * element_bytes) % 64 == 0 ? 64
                                                                                     : 32;
}
FJ_BUDGET constexpr int bwd_dkdv_sm90_tile_cols(int pad, int slice, int splits) {
  return pad > splits * slice ? pad : splits * slice;
}
// K, V and the ring (Q's slots, then dO's) in panels of `row_bytes` rows
// (bwd_sm90_panel_row_bytes), then the rest from a 1024-byte boundary; the rows' LSE and D a
// Q slot.
FJ_BUDGET constexpr int bwd_dkdv_sm90_shared_bytes(int element_bytes, int row_bytes, int dqk_pad,
                                                   int dv_pad, int dk_slice, int dv_slice,
                                                   int splits, int block_m, int block_n,
                                                   int stages, int dq_bytes) {
  const int q_slots = bwd_dkdv_sm90_q_slots(block_n, stages);
  return align_1024(
             ((panels(dqk_pad, element_bytes, row_bytes) + panels(dv_pad, element_bytes, row_bytes)) *
                  block_n +
              (panels(bwd_dkdv_sm90_tile_cols(dqk_pad, dk_slice, splits), element_bytes, row_bytes) *
                   q_slots +
               panels(bwd_dkdv_sm90_tile_cols(dv_pad, dv_slice, splits), element_bytes, row_bytes) *
                   stages) *
                  block_m) *
             row_bytes) +
         bwd_dkdv_sm90_pt_bytes(block_m, block_n) + dq_bytes + q_slots * block_m * 2 * 4 +
         bwd_dkdv_sm90_barrier_bytes(block_n, stages);
}
FJ_BUDGET constexpr int bwd_dkdv_sm90_consumer_registers(int dk_slice, int dv_slice,
                                                         int block_m) {
  return (dk_slice + dv_slice) / 2 + block_m + block_m / 4;
}
enum : int { kBwdDkDvSm90MaxAccumulatorRegisters = 208 };
// Whether the sm90 dK/dV kernel's products with a head dim as their N (dV's, dK's and dQ's) run
// on its live columns only (live_cols): an unsplit head (a split's last slice is known only at
// run time) in panels narrower than 128 bytes. There (d72: 80 -> 72 columns) the backward ran
// 1-3% faster on an H100; at d100 in 128-byte panels (112 -> 104) 2-8% slower
// (bench/NOTES.md entry 53).
FJ_BUDGET constexpr bool bwd_dkdv_sm90_live_widths(int splits, int row_bytes) {
  return splits == 1 && row_bytes < kPanelRowBytes;
}
// Paired consumers (64 keys, whole columns): the first holds dV, S^T and P^T packed, then
// (accumulating dQ) dV, P^T packed (dV's product in flight) and its dQ share; the second the
// same with dK, dP^T and dS^T.
FJ_BUDGET constexpr int bwd_dkdv_sm90_paired_registers(int dk_slice, int dv_slice, int block_m,
                                                       bool accumulates_dq) {
  const int dq0 =
      accumulates_dq ? bwd_dkdv_sm90_dq_share_cols(dk_slice, kDqAccumTileRows, 0) / 2 : 0;
  const int dq1 =
      accumulates_dq ? bwd_dkdv_sm90_dq_share_cols(dk_slice, kDqAccumTileRows, 1) / 2 : 0;
  const int first = dv_slice / 2 + block_m / 4 + (block_m / 2 > dq0 ? block_m / 2 : dq0);
  const int second = dk_slice / 2 + block_m / 4 + (block_m / 2 > dq1 ? block_m / 2 : dq1);
  return first > second ? first : second;
}
// Swapped consumers' dK^T and dV^T rows: a padded head dim in whole products of wgmma's 64.
FJ_BUDGET constexpr int bwd_dkdv_sm90_swapped_rows(int pad) { return (pad + 63) / 64 * 64; }
// Swapped consumers (48 keys each, 64 query rows a step, whole columns): dK^T and dV^T (48 of
// their columns a head-dim row, 64 rows a warp group: 3/8 of a register a column), then S and
// dP, or after them the consumer's dQ share.
FJ_BUDGET constexpr int bwd_dkdv_sm90_swapped_registers(int dqk_pad, int dv_pad) {
  const int dq = bwd_dkdv_sm90_dq_share_cols(dqk_pad, kDqAccumTileRows, 0) / 2;
  const int scores = 2 * kBwdDkDvSm90SwappedKeys / 4;  // S and dP, 48 keys x 64 rows each
  return 3 * (bwd_dkdv_sm90_swapped_rows(dqk_pad) + bwd_dkdv_sm90_swapped_rows(dv_pad)) / 8 +
         (scores > dq ? scores : dq);
}
// The dQ variants' consumers (FlashAttention-3's order): dK, dV, S^T and dP^T while P^T and
// dS^T are computed and packed; then dK, dV, both packed and the consumer's dQ share.
FJ_BUDGET constexpr int bwd_dkdv_sm90_dq_step_registers(int dk_slice, int dv_slice, int block_m) {
  const int after = block_m / 2 + bwd_dkdv_sm90_dq_cols(dk_slice, block_m) / 2;
  return (dk_slice + dv_slice) / 2 + (block_m > after ? block_m : after);
}

// ---- bwd_dq_sm90: Q and dO of the CTA's block_m rows, then a kStages ring of K and V tiles,
// in 128-byte panels, at 64 rows the paired consumers' exchange (P in fp32 and dS packed, a
// 64 x block_n tile each, and their four mbarriers), the mbarriers (q_full, then full and
// empty a slot) and the alignment slack. A consumer thread holds half of dQ's columns,
// block_n / 2 floats each of S and dP and block_n / 4 registers of dS packed to 16 bits.
enum : int { kBwdDqSm90PairedRows = 64 };
FJ_BUDGET constexpr int bwd_dq_sm90_exchange_bytes(int block_m, int block_n) {
  return block_m == kBwdDqSm90PairedRows ? block_m * block_n * (4 + 2) + 32 : 0;
}
FJ_BUDGET constexpr int bwd_dq_sm90_shared_bytes(int element_bytes, int dqk_pad, int dv_pad,
                                                 int block_m, int block_n, int stages) {
  return (panels(dqk_pad, element_bytes) + panels(dv_pad, element_bytes)) * kPanelRowBytes *
             (block_m + stages * block_n) +
         bwd_dq_sm90_exchange_bytes(block_m, block_n) + bwd_sm90_barrier_bytes(stages) + 1024;
}
FJ_BUDGET constexpr int bwd_dq_sm90_consumer_registers(int dq_slice, int block_n) {
  return dq_slice / 2 + block_n + block_n / 4;
}
// Paired consumers (64 rows a CTA, both on them): the first holds S, then dS packed, and its
// share of dQ's columns (bwd_dkdv_sm90_dq_cols0, as the dK/dV kernel's paired shares); the
// second dP (dS in its place) and the packed dS, and the other share.
FJ_BUDGET constexpr int bwd_dq_sm90_paired_registers(int dq_slice, int block_n) {
  const int cols0 = bwd_dkdv_sm90_dq_cols0(dq_slice), cols1 = dq_slice - cols0;
  return (cols0 > cols1 ? cols0 : cols1) / 2 + block_n / 2 + block_n / 4;
}
enum : int { kBwdDqSm90MaxAccumulatorRegisters = 208 };

// ---- bwd_dq_sm80: Q and dO, then a kStages ring of K and V tiles. A thread holds block_n / 2
// floats each of S and dP and half its dQ columns (192, d256 m64 n64 w4, takes all 255
// registers before any mask adds its own, hence 176).
FJ_BUDGET constexpr int bwd_dq_sm80_shared_bytes(int element_bytes, int dqk_pad, int dv_pad,
                                                 int block_m, int block_n, int stages) {
  return element_bytes *
         (conflict_free_stride(dqk_pad, element_bytes) +
          conflict_free_stride(dv_pad, element_bytes)) *
         (block_m + stages * block_n);
}
FJ_BUDGET constexpr int bwd_dq_sm80_accumulator_registers(int dq_slice, int block_n) {
  return block_n + dq_slice / 2;
}
enum : int { kBwdDqSm80MaxAccumulatorRegisters = 176 };

// ---- dec_sm80: Q, then a kStages ring of K and V tiles and of their keys' offsets in a
// paged cache (K's and V's: 16 bytes a key; reserved for dense caches too, so both
// variants of a spec get the same tiles); after the key loop the ring holds every warp's O
// (fp32 rows of dv_slice + 4) and row statistics for the merge. Every warp holds all block_m
// rows: per m16 group dv_slice / 2 floats of O, and for its block_n / warps keys as many
// halves of S and quarters of packed P as the forward. The tile of 8 rows (products
// transposed) holds dv_slice / 4 floats of O^T, a quarter of S^T and an eighth of packed P^T
// a key, and Q^T's fragments (dqk_pad / 8).
FJ_BUDGET constexpr int dec_sm80_merge_stride(int dv_slice) { return dv_slice + 4; }
FJ_BUDGET constexpr int dec_sm80_key_offsets_bytes(int block_n, int stages) {
  return 16 * stages * block_n;
}
FJ_BUDGET constexpr int dec_sm80_shared_bytes(int element_bytes, int dqk_pad, int dv_slice,
                                              int block_m, int block_n, int warps, int stages) {
  const int ring = fwd_sm80_shared_bytes(element_bytes, dqk_pad, dv_slice, block_m, block_n,
                                         stages) +
                   dec_sm80_key_offsets_bytes(block_n, stages);
  const int merge = 4 * warps * block_m * (dec_sm80_merge_stride(dv_slice) + 2);
  return ring > merge ? ring : merge;
}
FJ_BUDGET constexpr int dec_sm80_accumulator_registers(int dqk_pad, int dv_slice, int block_m,
                                                       int block_n, int warps) {
  if (block_m == 8)
    return dv_slice / 4 + block_n / warps / 4 + block_n / warps / 8 + dqk_pad / 8;
  return block_m / 16 * (dv_slice / 2 + block_n / warps / 2 + block_n / warps / 4);
}
// 176 let 64 rows of d64 and 32 of d136 through, and ptxas spilled them at 254-255 registers.
enum : int { kDecSm80MaxAccumulatorRegisters = 160 };

}  // namespace budget
}  // namespace fj

#undef FJ_BUDGET
