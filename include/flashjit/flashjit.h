// flashjit public API: describe an attention kernel, get it compiled just in time, launch it.
// No YAML, NVRTC or CUDA driver types appear here; device memory is passed as raw pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace flashjit {

// ---------------------------------------------------------------- errors
enum class ErrorKind {
  Spec,      // the YAML / spec is invalid (message names file:line:column and field)
  Shape,     // tensor shapes, strides or pointers do not fit the kernel
  Compile,   // NVRTC rejected the generated source (message holds the log and the lines)
  Driver,    // a CUDA driver call failed
  NoDevice,  // no CUDA driver or GPU on this machine
  Cache,     // the disk cache could not be used
  Io,        // a file could not be read or written
  Usage,     // a caller asked for something that is not supported (e.g. a mask not built yet)
};

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// ---------------------------------------------------------------- the spec
enum class DType { F16, BF16 };
enum class Arch { Auto, Sm80, Sm90a };
enum class MaskKind {
  None,
  SlidingWindow,  // query i sees key j iff i + d - window_left <= j <= i + d + window_right,
                  // d = seqlen_k - seqlen_q (bottom-right aligned, as causal)
};

const char* to_string(DType dtype);  // "fp16" | "bf16"
const char* to_string(Arch arch);    // "auto" | "sm80" | "sm90a"
const char* to_string(MaskKind mask);  // "none" | "sliding_window"

// Tile configuration of the sm80 path; all zero means "auto" (heuristic or tune DB).
struct Tiles {
  int block_m = 0;  // query rows per CTA
  int block_n = 0;  // key rows per main-loop step
  int warps = 0;    // warps per CTA (split the query rows)
  int stages = 0;   // K/V shared-memory pipeline depth
  bool is_auto() const { return block_m == 0; }
  bool operator==(const Tiles&) const = default;
};

// What the user wrote in YAML, validated. Construct it in C++ or parse it.
struct Spec {
  std::string name;
  int head_dim_qk = 0;  // 1..512
  int head_dim_v = 0;   // 1..512
  DType dtype = DType::BF16;
  bool causal = false;
  MaskKind mask = MaskKind::None;
  int window_left = 0;   // mask: {sliding_window: {left, right}}; 0 otherwise
  int window_right = 0;  // 0 with causal (causal already hides every key right of d)
  Arch arch = Arch::Auto;
  // hopper.warp_specialization: on sm_90a, the warp-specialised TMA + wgmma kernel (for
  // 16-byte aligned tensors; other calls run the sm80 kernel); false keeps the sm80 kernel.
  // Other targets always run the sm80 kernel.
  bool warp_specialization = true;
  Tiles tiles;                       // auto unless given

  // Parse YAML text; `source` names the text in error messages (a path, or "<string>").
  static Spec from_yaml(const std::string& text, const std::string& source = "<string>");
  static Spec from_file(const std::string& path);
  // Throws Error(Spec) naming the field if a value is out of range (from_yaml calls it).
  void validate() const;
  // The resolved spec as YAML, every field present (what `flashjit check` prints).
  std::string to_yaml() const;
};

// ---------------------------------------------------------------- launching
// FlashAttention layout (DESIGN.md): Q [batch, seqlen_q, heads_q, head_dim_qk],
// K [batch, seqlen_k, heads_kv, head_dim_qk], V [batch, seqlen_k, heads_kv, head_dim_v],
// O [batch, seqlen_q, heads_q, head_dim_v], LSE [batch, heads_q, seqlen_q] fp32 (contiguous).
// Strides are in elements; the head_dim stride must be 1.
struct TensorStrides {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t head = 0;
};

struct ForwardArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // may be null: LSE is then not written
  int batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0;
  TensorStrides q_stride, k_stride, v_stride, o_stride;
  float softmax_scale = 0.f;  // 0: 1/sqrt(head_dim_qk)

  // Strides of densely packed tensors in the layout above.
  static ForwardArgs contiguous(const Spec& spec, int batch, int heads_q, int heads_kv,
                                int seqlen_q, int seqlen_k);
};

// What the compiler made of one kernel (from the ptxas report and the cache).
struct CompileReport {
  std::string kernel_name;
  std::string target;  // "sm_80", "sm_90a", ...
  Tiles tiles;
  int registers = 0;
  int shared_bytes = 0;  // dynamic shared memory per CTA
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_bytes = 0;
  double compile_ms = 0;  // NVRTC time (0 on a cache hit)
  bool cache_hit = false;
  std::string cache_file;  // empty when the disk cache is disabled
};

struct DeviceInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int driver_version = 0;
  int max_shared_per_block = 0;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Launches on `stream` (a CUstream / cudaStream_t, or nullptr for the default stream).
  virtual void forward(const ForwardArgs& args, void* stream = nullptr) = 0;
  virtual const Spec& spec() const = 0;
  // Reports of every variant compiled so far (one per alignment/tile variant used).
  virtual std::vector<CompileReport> reports() const = 0;
};

struct RuntimeOptions {
  int device = 0;
  // Serve kernels from registered bundles only: a kernel (or alignment variant) missing from
  // them is an Error(Compile) naming what the bundles hold, never a disk-cache or NVRTC compile.
  bool require_prebuilt = false;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // True when a CUDA driver and a GPU are present (never throws).
  bool has_device() const;
  // Throws Error(NoDevice) without a GPU.
  DeviceInfo device() const;
  // The kernel for `spec` on this runtime's GPU; compiles lazily (throws NoDevice without a GPU).
  std::shared_ptr<Kernel> kernel(const Spec& spec);
  // Compiles `spec` for `target` ("sm_80", "sm_86", "sm_89", "sm_90a"); needs no GPU.
  CompileReport compile(const Spec& spec, const std::string& target);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Version of the generator; part of every cache key.
const char* version();

// ---------------------------------------------------------------- pre-built kernel bundles
// A bundle (`flashjit build`, or the CMake function flashjit_add_kernels, which embeds one in
// the application and registers it at start-up) holds compiled kernels. Every Runtime looks in
// the registered bundles first, then the disk cache, then compiles with NVRTC (loaded only
// then). Both functions copy what they need and throw Error(Io) for a corrupt bundle and
// Error(Usage) for one built by another generator version; `name` names it in messages.
void register_bundle(const void* data, size_t size, const std::string& name);
void register_bundle_file(const std::string& path);

}  // namespace flashjit
