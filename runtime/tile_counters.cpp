#include "runtime/tile_counters.h"

#include <cuda.h>  // CU_STREAM_PER_THREAD only

namespace flashjit::rt {

void TileCounters::add_chunk() {
  DeviceBuffer chunk(kPerChunk * sizeof(int), device_);
  Driver::get(device_).memset_u8(chunk.ptr(), 0, chunk.size());
  chunks_.push_back(std::move(chunk));
}

void TileCounters::reserve() {
  if (chunks_.empty()) add_chunk();
}

int* TileCounters::for_stream(void* stream) {
  const bool per_thread = stream == static_cast<void*>(CU_STREAM_PER_THREAD);
  const auto key =
      std::make_pair(stream, per_thread ? std::this_thread::get_id() : std::thread::id{});
  if (auto found = by_stream_.find(key); found != by_stream_.end()) return found->second;
  const size_t taken = by_stream_.size();
  if (taken == chunks_.size() * kPerChunk) add_chunk();
  int* counter = static_cast<int*>(chunks_[taken / kPerChunk].get()) + taken % kPerChunk;
  by_stream_.emplace(key, counter);
  return counter;
}

}  // namespace flashjit::rt
