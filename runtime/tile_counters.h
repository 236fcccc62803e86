// The sm90 kernel's tile counters (templates/fwd_sm90.cuh, TileScheduler): one int a stream,
// so that launches in flight on two streams never draw tickets from one counter. A launch
// leaves its counter at zero, so none is reset between launches.
#pragma once

#include <map>
#include <vector>

#include "runtime/driver.h"

namespace flashjit::rt {

class TileCounters {
 public:
  // Allocates the first kPerChunk counters. Call it outside any stream capture (where a
  // kernel's first launch happens anyway: it compiles and loads the kernel), so that a
  // capturing stream met later, such as torch.cuda.graph's side stream, takes a counter
  // without allocating.
  void reserve();
  // The counter of `stream` (nullptr: the default stream). Not thread-safe: the caller locks.
  int* for_stream(void* stream);

 private:
  static constexpr int kPerChunk = 64;
  std::vector<DeviceBuffer> chunks_;
  std::map<void*, int*> by_stream_;
};

}  // namespace flashjit::rt
