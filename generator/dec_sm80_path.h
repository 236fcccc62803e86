// The dec_sm80 path: decode's split kernel (templates/kernels/dec_sm80.cuh), a few packed
// query rows of a GQA group against one split of a long K/V cache, dense or paged, on every
// target. Its tiles depend on the call: block_m covers the packed rows (query rows times the
// group), so the runtime asks dec_sm80_tiles for them.
#pragma once

#include <string>

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kDecSm80Path;

// The masks decode serves, dense and paged caches alike: none, causal and windows. Block masks
// (and varlen batches) run the forward; the path, the runtime's choice of decode and its KV
// cache checks all ask this.
bool decode_serves_mask(const Spec& spec);

// Why `tiles` cannot run the decode kernel on `target` ("" when they can): block_m packed
// rows, 8 (one n8 tile, the products transposed) or m16 tiles (at most 64), block_n keys a
// tile split over the warps in k16 steps, the shared memory and the accumulator registers.
std::string dec_sm80_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                                   const std::string& target);
// The tiles for calls of `packed_rows` rows a (batch, kv head): 8 rows for up to 8, else the
// fewest m16 tiles that hold them (up to 64 rows; more take several row blocks), then the
// deepest key pipeline that fits.
Tiles dec_sm80_tiles(const Spec& spec, const std::string& target, int packed_rows);

}  // namespace flashjit::gen
