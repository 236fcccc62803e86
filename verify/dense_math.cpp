#include "verify/dense_math.h"

namespace flashjit::verify {

// Blocks of 4 x 2 outputs keep 8 independent accumulators in registers (enough to hide the
// FMA latency); chunks of kDepthChunk along t keep the rows of A in cache while the column
// blocks of B stream past them (a chunk resumes from the partial sum stored in C, which keeps
// the summation order).
template <class T>
void multiply_abt(const T* a, size_t lda, const T* b, size_t ldb, T* c, size_t ldc, int rows,
                  int cols, int depth) {
  constexpr int kRows = 4, kCols = 2, kDepthChunk = 256;
  for (int i = 0; i < rows; ++i) std::fill(c + i * ldc, c + i * ldc + cols, T{0});
  for (int t0 = 0; t0 < depth; t0 += kDepthChunk) {
    const int t1 = std::min(depth, t0 + kDepthChunk);
    for (int j0 = 0; j0 < cols; j0 += kCols) {
      const int nj = std::min(kCols, cols - j0);
      for (int i0 = 0; i0 < rows; i0 += kRows) {
        const int ni = std::min(kRows, rows - i0);
        if (ni == kRows && nj == kCols) {
          const T* a0 = a + i0 * lda;
          const T* b0 = b + j0 * ldb;
          T* c0 = c + i0 * ldc + j0;
          T s00 = c0[0], s01 = c0[1], s10 = c0[ldc], s11 = c0[ldc + 1];
          T s20 = c0[2 * ldc], s21 = c0[2 * ldc + 1], s30 = c0[3 * ldc], s31 = c0[3 * ldc + 1];
          for (int t = t0; t < t1; ++t) {
            const T x0 = a0[t], x1 = a0[lda + t], x2 = a0[2 * lda + t], x3 = a0[3 * lda + t];
            const T y0 = b0[t], y1 = b0[ldb + t];
            s00 += x0 * y0, s01 += x0 * y1, s10 += x1 * y0, s11 += x1 * y1;
            s20 += x2 * y0, s21 += x2 * y1, s30 += x3 * y0, s31 += x3 * y1;
          }
          c0[0] = s00, c0[1] = s01, c0[ldc] = s10, c0[ldc + 1] = s11;
          c0[2 * ldc] = s20, c0[2 * ldc + 1] = s21, c0[3 * ldc] = s30, c0[3 * ldc + 1] = s31;
          continue;
        }
        for (int i = i0; i < i0 + ni; ++i)
          for (int j = j0; j < j0 + nj; ++j) {
            T sum = c[i * ldc + j];
            for (int t = t0; t < t1; ++t) sum += a[i * lda + t] * b[j * ldb + t];
            c[i * ldc + j] = sum;
          }
      }
    }
  }
}

template void multiply_abt<double>(const double*, size_t, const double*, size_t, double*, size_t,
                                   int, int, int);
template void multiply_abt<float>(const float*, size_t, const float*, size_t, float*, size_t, int,
                                  int, int);

}  // namespace flashjit::verify
