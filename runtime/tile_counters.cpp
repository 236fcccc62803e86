#include "runtime/tile_counters.h"

namespace flashjit::rt {

void TileCounters::reserve() {
  if (!chunks_.empty()) return;
  DeviceBuffer chunk(kPerChunk * sizeof(int));
  Driver::get().memset_u8(chunk.ptr(), 0, chunk.size());
  chunks_.push_back(std::move(chunk));
}

int* TileCounters::for_stream(void* stream) {
  if (auto found = by_stream_.find(stream); found != by_stream_.end()) return found->second;
  const size_t taken = by_stream_.size();
  if (taken == chunks_.size() * kPerChunk) {
    DeviceBuffer chunk(kPerChunk * sizeof(int));
    Driver::get().memset_u8(chunk.ptr(), 0, chunk.size());
    chunks_.push_back(std::move(chunk));
  }
  int* counter = static_cast<int*>(chunks_[taken / kPerChunk].get()) + taken % kPerChunk;
  by_stream_.emplace(stream, counter);
  return counter;
}

}  // namespace flashjit::rt
