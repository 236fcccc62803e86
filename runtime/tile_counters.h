// The sm90 kernel's tile counters (TileScheduler in templates/kernels/fwd_sm90.cuh): one int
// a stream, so that launches in flight on two streams never draw tickets from one counter. A launch
// leaves its counter at zero, so none is reset between launches. The per-thread default
// stream (CU_STREAM_PER_THREAD) is a different stream in every thread: a counter each.
#pragma once

#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/driver.h"

namespace flashjit::rt {

class TileCounters {
 public:
  explicit TileCounters(int device) : device_(device) {}
  // Allocates the first kPerChunk counters. Call it outside any stream capture (where a
  // kernel's first launch happens anyway: it compiles and loads the kernel), so that a
  // capturing stream met later, such as torch.cuda.graph's side stream, takes a counter
  // without allocating.
  void reserve();
  // The counter of `stream` (nullptr: the default stream). Not thread-safe: the caller locks.
  int* for_stream(void* stream);

 private:
  static constexpr int kPerChunk = 64;
  void add_chunk();  // kPerChunk more counters, zeroed
  int device_;  // the GPU the counters live on
  std::vector<DeviceBuffer> chunks_;
  // (stream, the launching thread for the per-thread default stream, else no thread)
  std::map<std::pair<void*, std::thread::id>, int*> by_stream_;
};

}  // namespace flashjit::rt
