// DLPack 1.3's C exchange API: a tensor type's `__dlpack_c_exchange_api__`, a capsule named
// "dlpack_exchange_api" of C functions that describe one of the type's tensors in place and
// name the framework's current stream (torch.Tensor has it from PyTorch 2.10). Reading a tensor
// this way makes no capsule, allocates nothing and runs no Python, where to_dlpack and a capsule
// import cost about a microsecond a tensor; like to_dlpack, it synchronises no stream (so it is
// legal in a CUDA graph capture). Only the two functions flashjit calls are typed.
#pragma once

#include <cstdint>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace flashjit::py {

struct DLPackVersion {
  uint32_t major, minor;
};

struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  DLPackExchangeAPIHeader* prev_api;  // the same table at an older version, or null
};

// dlpack.h's DLPackExchangeAPI, field for field; nanobind's dltensor is laid out as DLTensor.
struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  // Fills `out` with pointers into the tensor (valid while it lives); 0, else -1 with a
  // Python error set. Optional: may be null.
  int (*dltensor_from_py_object_no_sync)(void* py_object, nanobind::dlpack::dltensor* out);
  // The framework's current stream on a device (null where it has none); 0, else -1.
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};

// The exchange API of `object`'s type at DLPack major version 1, or null where the type has
// none (or none that flashjit can read tensors with). Leaves no Python error set.
const DLPackExchangeAPI* exchange_api_of(nanobind::handle object);

}  // namespace flashjit::py
