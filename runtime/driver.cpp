#include "runtime/driver.h"

#include <cuda.h>  // types and prototypes only: nothing here links against libcuda
#include <dlfcn.h>

#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace flashjit::rt {
namespace {

// Every entry point is asked for with this ABI version, so a newer header or driver never
// silently hands us a _v3 with another signature. A driver older than 12.8 refuses it.
constexpr int kAbiVersion = 12080;

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

// The GPU whose context make_current last made current on this thread.
thread_local int current_device = 0;

}  // namespace

// The resolved entry points. decltype(&cuX) takes the prototype from cuda.h (the macro there
// picks the _v2 prototype where one exists, matching what cuGetProcAddress returns for the
// base name at kAbiVersion).
struct Driver::Api {
  void* library = nullptr;
  std::vector<CUdevice> devices;
  // Primary contexts, retained on a GPU's first use (retaining one costs memory on that GPU);
  // never released: they live as long as the process, like the CUDA runtime's.
  std::vector<CUcontext> contexts;
  std::unique_ptr<std::once_flag[]> retained;  // one a GPU: launches then take no lock
  // flashjit's own stream-ordered pool a GPU, made with its context. The device's default
  // pool returns its memory at every synchronisation (release threshold 0), so a workspace
  // taken from it each call would be mapped anew each time; this one keeps what it had.
  std::vector<CUmemoryPool> pools;

#define FLASHJIT_DRIVER_ENTRY(name) decltype(&name) p_##name = nullptr;
#define FLASHJIT_DRIVER_ENTRIES(X)                                                          \
  X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)     \
  X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload)              \
  X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx)          \
  X(cuMemAlloc) X(cuMemFree)                                                                 \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemsetD8) X(cuMemsetD32Async) X(cuMemcpy3DAsync)        \
  X(cuEventCreate) X(cuEventDestroy)                                                         \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuTensorMapEncodeTiled)   \
  X(cuMemPoolCreate) X(cuMemPoolSetAttribute) X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync)
  FLASHJIT_DRIVER_ENTRIES(FLASHJIT_DRIVER_ENTRY)
#undef FLASHJIT_DRIVER_ENTRY

  // Throws Error(Driver) naming the call, the code's name and its description.
  void check(CUresult result, const char* call) const {
    if (result == CUDA_SUCCESS) return;
    const char* name = "?";
    const char* text = "?";
    if (p_cuGetErrorName) p_cuGetErrorName(result, &name);
    if (p_cuGetErrorString) p_cuGetErrorString(result, &text);
    throw Error(ErrorKind::Driver,
                fmt::format("CUDA driver call {} failed: {} ({}): {}", call, name,
                            static_cast<int>(result), text));
  }
};

#define FLASHJIT_CU(name, ...) api_->check(api_->p_##name(__VA_ARGS__), #name)

Driver::Driver() : api_(std::make_unique<Api>()) {
  const auto no_device = [](const std::string& why) {
    return Error(ErrorKind::NoDevice, "no usable CUDA GPU: " + why);
  };
  api_->library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api_->library) {
    const char* why = dlerror();
    throw no_device(fmt::format("the CUDA driver library libcuda.so.1 could not be loaded ({})",
                                why ? why : "unknown reason"));
  }
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(api_->library, "cuGetProcAddress_v2"));
  if (!get_proc) {
    throw no_device("libcuda.so.1 has no cuGetProcAddress_v2 (the driver predates CUDA 12)");
  }
  const auto resolve = [&](const char* name, void** slot) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    const CUresult result = get_proc(name, slot, kAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !*slot) {
      throw no_device(fmt::format("the driver does not provide {} for CUDA {}.{} (error {}, "
                                  "status {}); a driver for CUDA 12.8 or newer is needed",
                                  name, kAbiVersion / 1000, kAbiVersion % 1000 / 10,
                                  static_cast<int>(result), static_cast<int>(status)));
    }
  };
#define FLASHJIT_DRIVER_RESOLVE(name) resolve(#name, reinterpret_cast<void**>(&api_->p_##name));
  FLASHJIT_DRIVER_ENTRIES(FLASHJIT_DRIVER_RESOLVE)
#undef FLASHJIT_DRIVER_RESOLVE

  if (CUresult result = api_->p_cuInit(0); result != CUDA_SUCCESS) {
    const char* name = "?";
    api_->p_cuGetErrorName(result, &name);
    throw no_device(fmt::format("cuInit failed with {} (is a GPU visible to this process?)", name));
  }
  int count = 0;
  FLASHJIT_CU(cuDeviceGetCount, &count);
  if (count < 1) throw no_device("the CUDA driver reports no GPU");
  api_->devices.resize(count);
  api_->contexts.resize(count, nullptr);
  api_->pools.resize(count, nullptr);
  api_->retained = std::make_unique<std::once_flag[]>(count);
  for (int i = 0; i < count; ++i) FLASHJIT_CU(cuDeviceGet, &api_->devices[i], i);
}

void Driver::make_current(int device) {
  if (device < 0 || device >= device_count())
    throw Error(ErrorKind::Usage, fmt::format("GPU {} does not exist: this machine has {} (0 to {})",
                                              device, device_count(), device_count() - 1));
  // A failed retain leaves the flag unset, so the next call tries again.
  std::call_once(api_->retained[device], [&] {
    FLASHJIT_CU(cuDevicePrimaryCtxRetain, &api_->contexts[device], api_->devices[device]);
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = device;
    FLASHJIT_CU(cuMemPoolCreate, &api_->pools[device], &props);
    cuuint64_t keep_everything = ~cuuint64_t{0};
    FLASHJIT_CU(cuMemPoolSetAttribute, api_->pools[device], CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &keep_everything);
  });
  FLASHJIT_CU(cuCtxSetCurrent, api_->contexts[device]);
  current_device = device;
}

int Driver::device_count() const { return static_cast<int>(api_->devices.size()); }

int Driver::gpu_count() {
  try {
    return instance().device_count();
  } catch (const Error&) {
    return 0;
  }
}

Driver& Driver::get(int device) {
  // The context is made current on every call: the application may have switched it since
  // (cudaSetDevice), and it is cheap.
  Driver& driver = instance();
  driver.make_current(device);
  return driver;
}

Driver& Driver::instance() {
  // The process-wide driver, or why there is none: built once (a function-local static is
  // initialised exactly once even when threads race). It retains no context: asking whether
  // a GPU is there costs no memory on any GPU.
  struct Slot {
    std::unique_ptr<Driver> driver;
    std::string reason;
  };
  static const Slot slot = [] {
    Slot s;
    try {
      s.driver.reset(new Driver());
    } catch (const Error& error) {
      s.reason = error.what();
    }
    return s;
  }();
  if (!slot.driver) throw Error(ErrorKind::NoDevice, slot.reason);
  return *slot.driver;
}

bool Driver::available() { return unavailable_reason().empty(); }

std::string Driver::unavailable_reason() {
  try {
    instance();
    return "";
  } catch (const Error& error) {
    return error.what();
  }
}

DeviceInfo Driver::device_info(int device) const {
  if (device < 0 || device >= device_count())
    throw Error(ErrorKind::Usage, fmt::format("GPU {} does not exist: this machine has {}",
                                              device, device_count()));
  const CUdevice handle = api_->devices[device];
  DeviceInfo info;
  char name[256] = {};
  FLASHJIT_CU(cuDeviceGetName, name, static_cast<int>(sizeof(name)), handle);
  info.name = name;
  const auto attribute = [&](CUdevice_attribute which) {
    int value = 0;
    FLASHJIT_CU(cuDeviceGetAttribute, &value, which, handle);
    return value;
  };
  info.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  FLASHJIT_CU(cuDriverGetVersion, &info.driver_version);
  return info;
}

void* Driver::load_module(const std::string& cubin) {
  CUmodule module = nullptr;
  FLASHJIT_CU(cuModuleLoadData, &module, cubin.data());
  return module;
}

void Driver::unload_module(void* module) {
  FLASHJIT_CU(cuModuleUnload, static_cast<CUmodule>(module));
}

void* Driver::get_function(void* module, const std::string& name) {
  CUfunction function = nullptr;
  FLASHJIT_CU(cuModuleGetFunction, &function, static_cast<CUmodule>(module), name.c_str());
  return function;
}

void Driver::set_max_dynamic_shared(void* function, int bytes) {
  FLASHJIT_CU(cuFuncSetAttribute, static_cast<CUfunction>(function),
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

void Driver::encode_tensor_map(void* map, const TensorMapBox& box) {
  static_assert(sizeof(CUtensorMap) == kTensorMapBytes, "CUtensorMap is 128 bytes");
  cuuint64_t dims[4], strides[3];
  cuuint32_t box_dims[4], element_strides[4] = {1, 1, 1, 1};
  for (int i = 0; i < 4; ++i) {
    dims[i] = box.dims[i];
    box_dims[i] = box.box[i];
  }
  for (int i = 0; i < 3; ++i) strides[i] = box.stride_bytes[i];
  // Elements are copied bit for bit (fp16 and bf16 alike as UINT16); boxes past the tensor's
  // end are zero-filled; the swizzle is what the kernel's wgmma descriptors expect.
  const CUtensorMapDataType element = [&] {
    switch (box.element) {
      case gen::TmaDataType::Uint16: return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    }
    throw Error(ErrorKind::Usage, "a TMA element type the driver wrapper does not map");
  }();
  const CUtensorMapSwizzle swizzle = [&] {
    switch (box.swizzle_bytes) {
      case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
      case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
      case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    }
    throw Error(ErrorKind::Usage,
                fmt::format("a TMA swizzle of {} bytes (128, 64 or 32)", box.swizzle_bytes));
  }();
  FLASHJIT_CU(cuTensorMapEncodeTiled, static_cast<CUtensorMap*>(map), element, 4, const_cast<void*>(box.base), dims, strides,
              box_dims, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
              swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

void Driver::launch(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned block_x,
                    unsigned shared_bytes, Stream stream, void** params, bool overlap_previous) {
  if (!overlap_previous) {
    FLASHJIT_CU(cuLaunchKernel, static_cast<CUfunction>(function), gx, gy, gz, block_x, 1, 1,
                shared_bytes, static_cast<CUstream>(stream), params, nullptr);
    return;
  }
  CUlaunchAttribute attribute{};
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = gx;
  config.gridDimY = gy;
  config.gridDimZ = gz;
  config.blockDimX = block_x;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = shared_bytes;
  config.hStream = static_cast<CUstream>(stream);
  config.attrs = &attribute;
  config.numAttrs = 1;
  FLASHJIT_CU(cuLaunchKernelEx, &config, static_cast<CUfunction>(function), params, nullptr);
}

DevicePtr Driver::alloc(size_t bytes) {
  CUdeviceptr ptr = 0;
  FLASHJIT_CU(cuMemAlloc, &ptr, bytes);
  return ptr;
}

void Driver::free(DevicePtr ptr) { FLASHJIT_CU(cuMemFree, ptr); }

DevicePtr Driver::alloc_async(size_t bytes, Stream stream) {
  CUdeviceptr ptr = 0;
  FLASHJIT_CU(cuMemAllocFromPoolAsync, &ptr, bytes, api_->pools[current_device],
              static_cast<CUstream>(stream));
  return ptr;
}

void Driver::free_async(DevicePtr ptr, Stream stream) {
  FLASHJIT_CU(cuMemFreeAsync, ptr, static_cast<CUstream>(stream));
}

void Driver::copy_to_device(DevicePtr dst, const void* src, size_t bytes) {
  FLASHJIT_CU(cuMemcpyHtoD, dst, src, bytes);
}

void Driver::copy_to_host(void* dst, DevicePtr src, size_t bytes) {
  FLASHJIT_CU(cuMemcpyDtoH, dst, src, bytes);
}

void Driver::memset_u8(DevicePtr dst, uint8_t value, size_t bytes) {
  FLASHJIT_CU(cuMemsetD8, dst, value, bytes);
}

void Driver::zero_async(DevicePtr dst, size_t bytes, Stream stream) {
  FLASHJIT_CU(cuMemsetD32Async, dst, 0u, bytes / 4, static_cast<CUstream>(stream));
}

void Driver::copy_rows_async(const RowsCopy& c, Stream stream) {
  CUDA_MEMCPY3D m{};
  m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  m.srcDevice = c.src;
  m.srcPitch = c.src_pitch;
  m.srcHeight = c.src_height;
  m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m.dstDevice = c.dst;
  m.dstPitch = c.dst_pitch;
  m.dstHeight = c.dst_height;
  m.WidthInBytes = c.row_bytes;
  m.Height = c.height;
  m.Depth = c.depth;
  FLASHJIT_CU(cuMemcpy3DAsync, &m, static_cast<CUstream>(stream));
}

void Driver::synchronize() { FLASHJIT_CU(cuCtxSynchronize); }

void* Driver::event_create() {
  CUevent event = nullptr;
  FLASHJIT_CU(cuEventCreate, &event, CU_EVENT_DEFAULT);
  return event;
}

void Driver::event_destroy(void* event) {
  FLASHJIT_CU(cuEventDestroy, static_cast<CUevent>(event));
}

void Driver::event_record(void* event, Stream stream) {
  FLASHJIT_CU(cuEventRecord, static_cast<CUevent>(event), static_cast<CUstream>(stream));
}

float Driver::event_elapsed_ms(void* start, void* stop) {
  FLASHJIT_CU(cuEventSynchronize, static_cast<CUevent>(stop));
  float ms = 0;
  FLASHJIT_CU(cuEventElapsedTime, &ms, static_cast<CUevent>(start), static_cast<CUevent>(stop));
  return ms;
}

// ---------------------------------------------------------------- StreamScratch

StreamScratch::~StreamScratch() {
  if (ptr_) {
    try {
      driver_->free_async(ptr_, stream_);
    } catch (const Error&) {
      // A destructor must not throw; the pool's memory goes back with the context.
    }
  }
}

StreamScratch::StreamScratch(StreamScratch&& other) noexcept
    : driver_(other.driver_), ptr_(std::exchange(other.ptr_, 0)), stream_(other.stream_) {}

StreamScratch& StreamScratch::operator=(StreamScratch&& other) noexcept {
  if (this != &other) {
    StreamScratch old(std::move(*this));
    driver_ = other.driver_;
    ptr_ = std::exchange(other.ptr_, 0);
    stream_ = other.stream_;
  }
  return *this;
}

// ---------------------------------------------------------------- DeviceBuffer

DeviceBuffer::DeviceBuffer(size_t bytes, int device)
    : ptr_(Driver::get(device).alloc(bytes)), bytes_(bytes), device_(device) {}

DeviceBuffer::~DeviceBuffer() {
  // A destructor must not throw; a failing cuMemFree here means the context is already gone.
  if (ptr_) {
    try {
      Driver::get(device_).free(ptr_);
    } catch (const Error&) {
    }
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

}  // namespace flashjit::rt
