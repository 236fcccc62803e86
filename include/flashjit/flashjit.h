// flashjit public API: describe an attention kernel, get it compiled just in time, launch it.
// No YAML, NVRTC or CUDA driver types appear here; device memory is passed as raw pointers.
#pragma once

#include <compare>
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
  BlockSparse,    // query i sees key j iff key block j / block_k is listed for query block
                  // i / block_q in the run-time layout (ForwardArgs::block_counts/indices)
  Pattern,        // a block pattern compiled into the kernel (PatternKind, configs/README.md)
};

// Compiled-in block patterns (mask: {pattern: {kind: ...}}), over query block qb = i / block
// and key block kb = j / block (configs/README.md has the exact definitions).
enum class PatternKind {
  None,         // the mask is not a pattern
  Local,        // |qb - kb| <= pattern_window
  Strided,      // (qb - kb) is a multiple of pattern_stride
  GlobalLocal,  // kb < pattern_global, or qb < pattern_global, or |qb - kb| <= pattern_window
};

// When a forward call runs the decode kernels (split-KV, GQA rows packed into one tile;
// README, "Decode"): Auto for few query rows against many keys and for every call with a KV
// cache (ForwardArgs::cache_seqlens, block_table); Always for every call decode serves; Never
// keeps the forward kernel (and refuses paged caches, which only decode reads).
enum class DecodeMode { Auto, Always, Never };

const char* to_string(DecodeMode mode);  // "auto" | "always" | "never"
const char* to_string(DType dtype);  // "fp16" | "bf16"
const char* to_string(Arch arch);    // "auto" | "sm80" | "sm90a"
const char* to_string(MaskKind mask);  // "none" | "sliding_window" | "block_sparse" | "pattern"
const char* to_string(PatternKind kind);  // "none" | "local" | "strided" | "global_local"

// Tile configuration of the sm80 path; all zero means "auto" (heuristic or tune DB).
struct Tiles {
  int block_m = 0;  // query rows per CTA
  int block_n = 0;  // key rows per main-loop step
  int warps = 0;    // warps per CTA (split the query rows)
  int stages = 0;   // K/V shared-memory pipeline depth
  bool is_auto() const { return block_m == 0; }
  bool operator==(const Tiles&) const = default;
  auto operator<=>(const Tiles&) const = default;
};

// The backward's tiles (TileSource::backward_tiles, `flashjit tune --backward`): those of its
// dK/dV step and of its dQ step, each for the path the spec takes for that step on 16-byte
// aligned, TMA-loadable calls (its primary path); auto leaves a step to its heuristic.
struct BackwardTiles {
  Tiles dkdv;
  Tiles dq;
  bool operator==(const BackwardTiles&) const = default;
  auto operator<=>(const BackwardTiles&) const = default;
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
  // hopper.warp_specialization: on sm_90a, the warp-specialised TMA + wgmma kernels, forward
  // and backward (for 16-byte aligned tensors; other calls run the sm80 kernels); false keeps
  // the sm80 kernels. Other targets always run the sm80 kernels.
  bool warp_specialization = true;
  // backward.deterministic: Kernel::backward must give bitwise-identical dQ, dK, dV on every
  // run and stream (a separate dQ kernel walks its key tiles in order). false lets a path
  // trade that for speed: on sm_90a, calls whose dK and dV fit one CTA add dQ up in the
  // dK/dV kernel with fp32 bulk reductions (bench/NOTES.md, entry 22).
  bool deterministic = false;
  DecodeMode decode = DecodeMode::Auto;  // decode: auto | always | never
  Tiles tiles;                       // auto unless given
  // Block masks. block_sparse: the mask block of the run-time layout is block_q query rows by
  // block_k keys. pattern: block_q == block_k == the pattern's block. 0 for other masks.
  int block_q = 0;
  int block_k = 0;
  PatternKind pattern = PatternKind::None;  // set iff mask == Pattern
  int pattern_window = 0;  // local: blocks; global_local: window_blocks
  int pattern_stride = 0;  // strided: stride
  int pattern_global = 0;  // global_local: global_blocks

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

  // Block-sparse layout (mask: block_sparse only; FlexAttention's BlockMask, compressed form):
  // block_counts [layout_batch, layout_heads, layout_q_blocks] int32 and block_indices
  // [layout_batch, layout_heads, layout_q_blocks, layout_max_blocks] int32, contiguous device
  // arrays. Query block qb of (batch b, head h) sees the key blocks
  // block_indices[b][h][qb][0 .. block_counts[b][h][qb]) (any order, each at most once);
  // layout_batch is 1 (shared by every batch) or batch, layout_heads 1 or heads_q;
  // layout_q_blocks >= ceil(seqlen_q / block_q). Counts above layout_max_blocks and indices
  // outside [0, ceil(seqlen_k / block_k)) are errors of the caller that the kernel survives
  // by clamping the count and skipping the index.
  const int32_t* block_counts = nullptr;
  const int32_t* block_indices = nullptr;
  int layout_batch = 0, layout_heads = 0, layout_q_blocks = 0, layout_max_blocks = 0;

  // Variable-length batches (FlashAttention's varlen): both null, or both set. Then Q/O are
  // packed [total_q, heads, dim] and K/V [total_k, heads_kv, dim] (the batch strides are not
  // used), sequence b holds rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 (int32 device
  // arrays of batch + 1 prefix sums starting at 0), seqlen_q / seqlen_k are the longest
  // sequence's lengths (FlashAttention's max_seqlen_q / max_seqlen_k; they size the grid)
  // and LSE is [heads_q, total_q]. Causal, windows and block masks apply per sequence.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  // With cu_seqlens: the packed tensors' row counts (cu_seqlens_q[batch] and
  // cu_seqlens_k[batch], which the host cannot read without waiting for the device). Given,
  // the sm90 kernel's tensor maps can address the packed tensors; 0 (unknown) or a call TMA
  // cannot load otherwise runs the sm80 kernel.
  int total_q = 0, total_k = 0;

  // A KV cache (decode; README, "Decode"). cache_seqlens: int32 [batch] device array, the keys
  // each sequence holds (values above seqlen_k count as seqlen_k, below 0 as 0); null: every
  // sequence holds seqlen_k. The query rows are the last seqlen_q positions of each sequence
  // (causal and windows are bottom-right aligned to its own length). Not with cu_seqlens.
  const int32_t* cache_seqlens = nullptr;
  // A paged cache: K is [num_pages, page_size, heads_kv, head_dim_qk] and V likewise
  // (k_stride.batch / v_stride.batch step from page to page), and block_table int32 [batch,
  // max_pages] (a contiguous device array) lists each sequence's pages in order: key j of
  // sequence b is row j % page_size of page block_table[b][j / page_size]. seqlen_k is the
  // longest sequence, at most max_pages * page_size. Page numbers outside [0, num_pages) are
  // errors of the caller that the kernel survives by clamping them. vLLM's and FlashInfer's
  // layouts map onto it. Null: a dense cache, K [batch, seqlen_k, heads_kv, dim].
  const int32_t* block_table = nullptr;
  int page_size = 0, max_pages = 0, num_pages = 0;

  // Scratch of a decode call that splits the keys, or of a call whose Q/K/V rows the TMA
  // kernel cannot address in place and the runtime copies into 16-byte rows first
  // (Kernel::forward_workspace_bytes); null: the runtime takes it from the GPU's
  // stream-ordered pool for the call.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  // A decode call's key splits (README, "Decode"): 0 lets the runtime choose (the tune DB's
  // count for the call's decode bucket, else its heuristic); 1..128 asks for that many, cut
  // to what the call allows (its key tiles). Only for calls that run the decode kernels.
  int kv_splits = 0;

  // Strides of densely packed tensors in the layout above.
  static ForwardArgs contiguous(const Spec& spec, int batch, int heads_q, int heads_kv,
                                int seqlen_q, int seqlen_k);
  // Strides of packed varlen tensors ([total, heads, dim]) for `batch` sequences whose longest
  // are max_seqlen_q / max_seqlen_k and whose rows number total_q / total_k (0: not known);
  // the caller sets cu_seqlens_q / cu_seqlens_k.
  static ForwardArgs varlen(const Spec& spec, int batch, int heads_q, int heads_kv,
                            int max_seqlen_q, int max_seqlen_k, int total_q = 0,
                            int total_k = 0);
};

// A block-sparse layout on the host, in the form ForwardArgs takes (copy both arrays to the
// device and set the layout_* fields from these).
struct BlockLayout {
  int batch = 0, heads = 0, q_blocks = 0, max_blocks = 0;
  std::vector<int32_t> counts;   // [batch, heads, q_blocks]
  std::vector<int32_t> indices;  // [batch, heads, q_blocks, max_blocks]; unused entries are 0
};

// The layout of a dense boolean block matrix `visible` [batch, heads, q_blocks, k_blocks]
// (row-major; nonzero: query block qb sees key block kb). batch and heads may be 1
// (broadcast). Key blocks are listed in ascending order; max_blocks is the largest count
// (at least 1, so the arrays are never empty). Throws Error(Shape) on sizes that do not fit.
BlockLayout block_layout_from_dense(const std::vector<uint8_t>& visible, int batch, int heads,
                                    int q_blocks, int k_blocks);

// The backward pass's arguments: the forward's inputs, output and LSE as the forward had them,
// the output's gradient dO (O's layout) in, and dQ, dK, dV out in Q's, K's and V's layouts
// (dK/dV summed over the query heads of a GQA group). Every dQ, dK and dV element is written,
// zero where no visible (query, key) pair reaches it. With Spec::deterministic the gradients
// are bitwise the same on every run and stream; without it dQ may differ in its last bits
// from run to run (the order of fp32 sums).
struct BackwardArgs {
  ForwardArgs forward;  // q, k, v, o and lse (required), shape, strides, masks, varlen
  const void* d_o = nullptr;
  void* d_q = nullptr;
  void* d_k = nullptr;
  void* d_v = nullptr;
  TensorStrides d_o_stride, d_q_stride, d_k_stride, d_v_stride;
  // Scratch the launches share (Kernel::backward_workspace_bytes); null: the runtime
  // allocates it.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Two attention results of the same queries over disjoint sets of keys (ring attention's
// steps, a cache split across devices), as the forward wrote them: O in O's layout (the
// kernel's dtype and head_dim_v) and LSE fp32 contiguous [batch, heads, seqlen]. Kernel::merge
// writes the result over both sets: O = (w_a O_a + w_b O_b) / (w_a + w_b), w = exp(LSE -
// max), LSE = max + ln(w_a + w_b). o / lse may be o_a / lse_a: a running output merged in
// place. A row neither side saw a key of (both LSEs -inf) gives O = 0 and LSE = -inf.
struct MergeArgs {
  const void* o_a = nullptr;
  const float* lse_a = nullptr;
  const void* o_b = nullptr;
  const float* lse_b = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  int batch = 0, heads = 0, seqlen = 0;
  TensorStrides o_a_stride, o_b_stride, o_stride;
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
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Launches on `stream` (a CUstream / cudaStream_t, or nullptr for the default stream).
  // The first call compiles and loads: make it outside any CUDA graph capture. The sm90
  // kernel draws tiles from a counter of the stream: a captured launch keeps the counter of
  // the stream it was captured on (README, "forward may be called from several threads").
  // A call with few query rows against many keys, or with a KV cache, runs the decode
  // kernels instead (Spec::decode; FLASHJIT_VERBOSE says which ran and why).
  virtual void forward(const ForwardArgs& args, void* stream = nullptr) = 0;
  // Bytes of workspace a forward call with these arguments needs (0 unless it is a decode
  // call that splits its keys or a call whose Q/K/V are copied for TMA; 256-byte aligned).
  virtual size_t forward_workspace_bytes(const ForwardArgs& args) const = 0;
  // The gradients of the forward (BackwardArgs): three launches on `stream` (D = rowsum(dO *
  // O), then dK/dV and dQ). Without a workspace the runtime takes one from the stream-ordered
  // pool of the GPU for the call. Compiles on first use, as forward().
  virtual void backward(const BackwardArgs& args, void* stream = nullptr) = 0;
  // Bytes of workspace a backward call with these arguments needs (256-byte aligned): dQ's
  // fp32 accumulator and D, and the copies of Q, K, V and dO the TMA kernels load (rows off
  // 16-byte boundaries; Q and dO rows longer than 256 bytes off 64-byte ones).
  virtual size_t backward_workspace_bytes(const BackwardArgs& args) const = 0;
  // Merges two partial results of this kernel's dtype and head_dim_v (MergeArgs): one launch
  // on `stream`, compiled on first use.
  virtual void merge(const MergeArgs& args, void* stream = nullptr) = 0;
  virtual const Spec& spec() const = 0;
  // Reports of every variant compiled so far (one per alignment/tile variant used).
  virtual std::vector<CompileReport> reports() const = 0;
};

// Where a kernel's tiles come from when its spec leaves them auto (`tiles: auto`), and its
// backward's always. The default reads the tune DB (FLASHJIT_TUNE_DB, else <cache
// dir>/tune.json) that `flashjit tune` writes; an application can give its own. A source is
// asked once per kernel, pass and shape bucket (seqlens and batch * heads rounded up to
// powers of two), from any thread.
class TileSource {
 public:
  struct Query {
    const Spec& spec;
    const std::string& target;  // "sm_90a"
    const DeviceInfo& device;
    int batch, heads_q, seqlen_q, seqlen_k;  // the call that asks
  };
  virtual ~TileSource() = default;
  // The tiles to use, or nullopt for the built-in heuristic; `why` gets one line for
  // FLASHJIT_VERBOSE. Tiles that cannot run the kernel are ignored (and said so).
  virtual std::optional<Tiles> tiles(const Query& query, std::string& why) const = 0;
  // The same for a backward call (its forward arguments in `query`); a spec's own `tiles:`
  // are the forward's and do not reach the backward. This default has none: a source that
  // does not override it leaves the backward to the heuristic.
  virtual std::optional<BackwardTiles> backward_tiles(const Query& query, std::string& why) const;
};

struct RuntimeOptions {
  // The GPU (a CUDA driver ordinal) this runtime's kernels load and launch on: one Runtime a
  // GPU on a multi-GPU server. Its primary context is made current on the launching thread.
  int device = 0;
  std::shared_ptr<const TileSource> tile_source;  // null: the tune DB
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

  // True when a CUDA driver and this runtime's GPU (RuntimeOptions::device) are present;
  // never throws, and takes no memory on any GPU to find out.
  bool has_device() const;
  // Throws Error(NoDevice) without a GPU.
  DeviceInfo device() const;
  // The kernel for `spec` on this runtime's GPU; compiles lazily (throws NoDevice without a GPU).
  std::shared_ptr<Kernel> kernel(const Spec& spec);
  // Compiles `spec` for `target` ("sm_80", "sm_86", "sm_89", "sm_90a"); needs no GPU. The
  // kernel is the one a call gets whose tensors' rows all start at multiples of `align_bytes`
  // (16, 8, 4 or 2): 16-byte aligned tensors, or densely packed ones of head dims that are
  // multiples of 8; packed tensors of other head dims give 2 x head_dim's largest power-of-two
  // divisor (d100: 8, d59: 2). Throws Error(Usage) for another alignment.
  CompileReport compile(const Spec& spec, const std::string& target, int align_bytes = 16);
  // The same for the backward's kernels, in launch order.
  std::vector<CompileReport> compile_backward(const Spec& spec, const std::string& target,
                                              int align_bytes = 16);
  // The same for decode's kernels: the split kernel for every tile height the runtime picks
  // (16 to 64 packed rows), dense and paged caches, the combine, then the merge
  // (Kernel::merge). Only the merge for a spec that decode does not serve (block masks).
  std::vector<CompileReport> compile_decode(const Spec& spec, const std::string& target,
                                            int align_bytes = 16);

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
