// Shared-memory layouts of the sm80 kernel's tiles.
#pragma once

namespace fj {

// A shared-memory row stride, in elements, of an odd number of 16-byte units: the 8 rows an
// ldmatrix reads then fall into 8 different groups of banks (no conflicts, any head dim).
// ELEM_BYTES is the size of one element.
template <int ELEM_BYTES>
__host__ __device__ constexpr int conflict_free_stride(int cols) {
  constexpr int kPerUnit = 16 / ELEM_BYTES;  // elements per 16-byte unit
  const int units = cols / kPerUnit;
  return kPerUnit * (units % 2 == 1 ? units : units + 1);
}

}  // namespace fj
