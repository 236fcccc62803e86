// The CUDA Driver API, opened at run time with dlopen("libcuda.so.1") so that the library
// and the CLI load and do all their CPU-side work on machines without a driver or GPU.
// Entry points are resolved through cuGetProcAddress with a fixed ABI version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "flashjit/flashjit.h"
#include "generator/element_types.h"

namespace flashjit::rt {

using DevicePtr = uint64_t;  // CUdeviceptr
using Stream = void*;        // CUstream; nullptr is the default stream

// A 4-d tensor as TMA reads it: its element type, dims innermost first, the strides of
// dims 1..3 in bytes (multiples of 16), the box one copy moves, and the swizzle span its rows
// are written in (128, 64 or 32 bytes: the box's row).
struct TensorMapBox {
  gen::TmaDataType element = gen::TmaDataType::Uint16;
  const void* base = nullptr;
  uint64_t dims[4] = {};
  uint64_t stride_bytes[3] = {};
  uint32_t box[4] = {};
  int swizzle_bytes = 128;
};
constexpr size_t kTensorMapBytes = 128;  // sizeof(CUtensorMap)

// A device-to-device copy of `depth` slices of `height` rows of `row_bytes` each: source row
// r of slice z at src + (z * src_height + r) * src_pitch, destination likewise.
struct RowsCopy {
  DevicePtr src = 0, dst = 0;
  size_t row_bytes = 0, height = 0, depth = 0;
  size_t src_pitch = 0, src_height = 0, dst_pitch = 0, dst_height = 0;
};

class Driver {
 public:
  // The process-wide driver, initialised on first use (dlopen, cuInit), with the primary
  // context of GPU `device` (retained on its first use) made current on the calling thread:
  // every call below acts on that GPU. Throws Error(NoDevice) with the reason (no
  // libcuda.so.1, cuInit failed, no device) when there is no usable GPU, Error(Usage) for an
  // ordinal this machine does not have.
  static Driver& get(int device = 0);
  // Never throws: true when a driver and a GPU are there (no context is retained to say so).
  static bool available();
  // Why available() is false ("" when it is true).
  static std::string unavailable_reason();

  // The number of GPUs, 0 without a driver; never throws, retains no context.
  static int gpu_count();
  DeviceInfo device_info(int device = 0) const;

  // Modules and launches. A module owns its functions; unload() frees it.
  void* load_module(const std::string& cubin);  // CUmodule
  void unload_module(void* module);
  void* get_function(void* module, const std::string& name);  // CUfunction
  void set_max_dynamic_shared(void* function, int bytes);
  // cuTensorMapEncodeTiled into `map` (kTensorMapBytes, 64-byte aligned), 128-byte swizzle.
  void encode_tensor_map(void* map, const TensorMapBox& box);
  // overlap_previous (sm_90 on): programmatic dependent launch, the kernel may start before
  // the stream's previous kernel ends; it must wait for it (fj::wait_for_previous_launch)
  // before reading that kernel's results.
  void launch(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned block_x,
              unsigned shared_bytes, Stream stream, void** params, bool overlap_previous = false);

  // Memory (used by the CLI, the tests and the benchmark; the API takes the user's pointers).
  DevicePtr alloc(size_t bytes);
  void free(DevicePtr ptr);
  // Stream-ordered memory from flashjit's pool of the current GPU (which keeps its memory
  // between calls): usable by work queued on `stream` after the allocation, returned once
  // the work queued before the free is done. The backward's and decode's workspace when the
  // caller gives none.
  DevicePtr alloc_async(size_t bytes, Stream stream);
  void free_async(DevicePtr ptr, Stream stream);
  void copy_to_device(DevicePtr dst, const void* src, size_t bytes);
  void copy_to_host(void* dst, DevicePtr src, size_t bytes);
  void memset_u8(DevicePtr dst, uint8_t value, size_t bytes);
  // Zeroes `bytes` (a multiple of 4) at dst, queued on `stream`: the backward's dq_accum.
  void zero_async(DevicePtr dst, size_t bytes, Stream stream);
  // cuMemcpy3DAsync of `copy`, queued on `stream` (runtime/staging.h's copies).
  void copy_rows_async(const RowsCopy& copy, Stream stream);
  void synchronize();

  // Events for timing: elapsed milliseconds between two recorded events.
  void* event_create();
  void event_destroy(void* event);
  void event_record(void* event, Stream stream);
  float event_elapsed_ms(void* start, void* stop);  // synchronizes on stop

 private:
  Driver();
  static Driver& instance();  // dlopen and cuInit once; throws Error(NoDevice)
  int device_count() const;
  void make_current(int device);
  struct Api;
  std::unique_ptr<Api> api_;
};

// RAII device allocation on GPU `device`.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, int device = 0);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  DevicePtr ptr() const { return ptr_; }
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  DevicePtr ptr_ = 0;
  size_t bytes_ = 0;
  int device_ = 0;
};

// RAII stream-ordered allocation (Driver::alloc_async), freed on `stream` when it goes:
// work queued before the free still sees the memory.
class StreamScratch {
 public:
  StreamScratch() = default;
  StreamScratch(Driver& driver, size_t bytes, Stream stream)
      : driver_(&driver), ptr_(driver.alloc_async(bytes, stream)), stream_(stream) {}
  ~StreamScratch();
  StreamScratch(StreamScratch&& other) noexcept;
  StreamScratch& operator=(StreamScratch&& other) noexcept;
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  void* get() const { return reinterpret_cast<void*>(ptr_); }

 private:
  Driver* driver_ = nullptr;
  DevicePtr ptr_ = 0;
  Stream stream_ = nullptr;
};

// RAII CUDA event, destroyed on scope exit (a failing launch between two records leaks none).
class Event {
 public:
  Event() : event_(Driver::get().event_create()) {}
  ~Event() { Driver::get().event_destroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void* get() const { return event_; }

 private:
  void* event_;
};

}  // namespace flashjit::rt
