// The dense building blocks of the CPU references (reference.cpp, reference_backward.cpp): one
// matrix product whose every element is summed in a fixed order, and a loop over tasks on a
// few threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace flashjit::verify {

// C[i][j] = sum over t = 0, 1, ..., depth - 1 of A[i][t] * B[j][t] (row-major, leading
// dimensions lda/ldb/ldc), accumulated in T (double for the fp64 references, float for the
// fp32 accumulation of the low-precision one). Every element is one sum in ascending t, so
// the result does not depend on the blocking or on the thread count.
template <class T>
void multiply_abt(const T* a, size_t lda, const T* b, size_t ldb, T* c, size_t ldc, int rows,
                  int cols, int depth);

// Runs fn(task) for task in [0, count) on `threads` threads.
template <class Fn>
void parallel_for(int count, int threads, Fn fn) {
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int task = next++; task < count; task = next++) fn(task);
  };
  std::vector<std::jthread> pool;
  for (int t = 1; t < std::min(threads, count); ++t) pool.emplace_back(worker);
  worker();
}

// `threads` as the references take it: 0 means every hardware thread.
inline int thread_count(int threads) {
  return threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace flashjit::verify
