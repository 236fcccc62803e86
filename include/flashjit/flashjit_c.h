/* flashjit C ABI: a thin layer over the C++ API (flashjit.h) for callers that cannot use C++,
 * e.g. Python through ctypes (bench/compare.py). Everything real happens in the C++ API.
 *
 * Every function that can fail returns a status: FLASHJIT_OK (0), or the flashjit::ErrorKind
 * of the failure + 1. flashjit_last_error() then holds the message, for the calling thread.
 *
 * Layout and strides are those of the C++ API (DESIGN.md): Q [batch, seqlen_q, heads_q, dqk],
 * K [batch, seqlen_k, heads_kv, dqk], V [batch, seqlen_k, heads_kv, dv],
 * O [batch, seqlen_q, heads_q, dv], LSE [batch, heads_q, seqlen_q] fp32 contiguous; the
 * gradients dO, dQ, dK, dV have the layouts of O, Q, K, V.
 * Strides are in elements, ordered {batch, seq, head}; the head_dim stride must be 1. */
#ifndef FLASHJIT_FLASHJIT_C_H
#define FLASHJIT_FLASHJIT_C_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define FLASHJIT_C_API __attribute__((visibility("default")))
#else
#define FLASHJIT_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: flashjit::ErrorKind + 1, in the order of that enum. */
enum flashjit_status {
  FLASHJIT_OK = 0,
  FLASHJIT_ERROR_SPEC = 1,       /* invalid YAML / spec */
  FLASHJIT_ERROR_SHAPE = 2,      /* shapes, strides or pointers do not fit the kernel */
  FLASHJIT_ERROR_COMPILE = 3,    /* NVRTC rejected the generated source */
  FLASHJIT_ERROR_DRIVER = 4,     /* a CUDA driver call failed */
  FLASHJIT_ERROR_NO_DEVICE = 5,  /* no CUDA driver or GPU on this machine */
  FLASHJIT_ERROR_CACHE = 6,      /* the disk cache could not be used */
  FLASHJIT_ERROR_IO = 7,         /* a file could not be read or written */
  FLASHJIT_ERROR_USAGE = 8,      /* unsupported request, or a null handle/argument */
  FLASHJIT_ERROR_INTERNAL = 9    /* any other C++ exception (e.g. out of host memory) */
};

typedef struct flashjit_runtime flashjit_runtime; /* owns the compile caches */
typedef struct flashjit_kernel flashjit_kernel;   /* one spec, compiled on first forward */

/* Message of the last failure on this thread ("" if none yet). Valid until the next failing
 * call on this thread. */
FLASHJIT_C_API const char* flashjit_last_error(void);

/* The generator version (part of every cache key). */
FLASHJIT_C_API const char* flashjit_version(void);

/* A runtime for device 0. Reads FLASHJIT_CACHE_DIR / FLASHJIT_DISABLE_CACHE when created.
 * Works without a GPU (kernels then fail with FLASHJIT_ERROR_NO_DEVICE). */
FLASHJIT_C_API int flashjit_runtime_create(flashjit_runtime** out);
/* The same for GPU `device` (an ordinal of the CUDA driver; an ordinal the machine does not
 * have fails when the first kernel is made, with FLASHJIT_ERROR_USAGE). */
FLASHJIT_C_API int flashjit_runtime_create_on_device(int device, flashjit_runtime** out);
FLASHJIT_C_API void flashjit_runtime_destroy(flashjit_runtime* runtime); /* null: no-op */

/* A kernel for the spec in `yaml_text` (the YAML schema of configs/README.md). Kernels stay
 * valid after their runtime is destroyed. Fails with FLASHJIT_ERROR_SPEC on a bad spec and
 * FLASHJIT_ERROR_NO_DEVICE without a GPU. */
FLASHJIT_C_API int flashjit_kernel_from_yaml(flashjit_runtime* runtime, const char* yaml_text,
                                             flashjit_kernel** out);
FLASHJIT_C_API void flashjit_kernel_destroy(flashjit_kernel* kernel); /* null: no-op */

/* Launches the forward pass on `stream` (a CUstream / cudaStream_t; null = default stream).
 * The first call for a new pointer/stride alignment compiles (or loads from the disk cache)
 * before launching. `lse` may be null. softmax_scale 0 means 1/sqrt(head_dim_qk). */
FLASHJIT_C_API int flashjit_forward(flashjit_kernel* kernel, const void* q, const void* k,
                                    const void* v, void* o, float* lse, int batch, int heads_q,
                                    int heads_kv, int seqlen_q, int seqlen_k,
                                    const int64_t q_strides[3], const int64_t k_strides[3],
                                    const int64_t v_strides[3], const int64_t o_strides[3],
                                    float softmax_scale, void* stream);

/* The block-sparse layout and the variable-length prefix sums of a call (the ForwardArgs
 * fields of the same names in flashjit.h; configs/README.md, Masks): int32 device arrays, or
 * null and 0 where the call has none. */
typedef struct flashjit_mask_args {
  const int32_t* block_counts;  /* [layout_batch, layout_heads, layout_q_blocks] */
  const int32_t* block_indices; /* [layout_batch, layout_heads, layout_q_blocks, layout_max_blocks] */
  int layout_batch, layout_heads, layout_q_blocks, layout_max_blocks;
  const int32_t* cu_seqlens_q; /* batch + 1 prefix sums; with cu_seqlens_k: packed tensors */
  const int32_t* cu_seqlens_k;
  int total_q, total_k; /* the packed row counts, or 0 (not known: the sm80 kernel runs) */
} flashjit_mask_args;

/* flashjit_forward with a block-sparse layout and/or variable-length batches (`mask` may be
 * null: then it is flashjit_forward). With cu_seqlens, seqlen_q / seqlen_k are the longest
 * sequence's lengths and LSE is [heads_q, total_q]. */
FLASHJIT_C_API int flashjit_forward_masked(flashjit_kernel* kernel, const void* q, const void* k,
                                           const void* v, void* o, float* lse, int batch,
                                           int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                                           const int64_t q_strides[3], const int64_t k_strides[3],
                                           const int64_t v_strides[3], const int64_t o_strides[3],
                                           float softmax_scale, const flashjit_mask_args* mask,
                                           void* stream);

/* A KV cache (the ForwardArgs fields of the same names in flashjit.h; README, "Decode"):
 * each sequence's cached keys (int32 [batch], or null: seqlen_k each) and, for a paged cache,
 * the block table (int32 [batch, max_pages]; null: K/V are dense [batch, seqlen_k, heads_kv,
 * dim]). With a block table K/V are [num_pages, page_size, heads_kv, dim] and their batch
 * stride steps from page to page. */
typedef struct flashjit_kv_cache_args {
  const int32_t* cache_seqlens;
  const int32_t* block_table;
  int page_size, max_pages, num_pages;
} flashjit_kv_cache_args;

/* flashjit_forward against a KV cache: the decode kernels (split over the keys, the GQA
 * group's rows in one tile). `workspace` is device scratch of at least
 * flashjit_forward_workspace_bytes bytes, or null (then the runtime takes it from the GPU's
 * stream-ordered pool). */
FLASHJIT_C_API int flashjit_forward_kv_cache(flashjit_kernel* kernel, const void* q,
                                             const void* k, const void* v, void* o, float* lse,
                                             int batch, int heads_q, int heads_kv, int seqlen_q,
                                             int seqlen_k, const int64_t q_strides[3],
                                             const int64_t k_strides[3],
                                             const int64_t v_strides[3],
                                             const int64_t o_strides[3], float softmax_scale,
                                             const flashjit_kv_cache_args* cache,
                                             void* workspace, size_t workspace_bytes,
                                             void* stream);
/* Into *out: the workspace bytes flashjit_forward_kv_cache needs for these arguments (0
 * unless the call splits its keys). */
FLASHJIT_C_API int flashjit_forward_workspace_bytes(
    flashjit_kernel* kernel, const void* q, const void* k, const void* v, void* o, float* lse,
    int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k, const int64_t q_strides[3],
    const int64_t k_strides[3], const int64_t v_strides[3], const int64_t o_strides[3],
    float softmax_scale, const flashjit_kv_cache_args* cache, size_t* out);

/* Merges two attention results of the same queries over disjoint key sets
 * (flashjit::Kernel::merge): o_a / o_b / o in O's layout with their strides, LSEs fp32
 * [batch, heads, seqlen]; o and lse may be o_a and lse_a (in place). */
FLASHJIT_C_API int flashjit_merge(flashjit_kernel* kernel, const void* o_a, const float* lse_a,
                                  const void* o_b, const float* lse_b, void* o, float* lse,
                                  int batch, int heads, int seqlen, const int64_t o_a_strides[3],
                                  const int64_t o_b_strides[3], const int64_t o_strides[3],
                                  void* stream);

/* Launches the backward pass (flashjit::Kernel::backward) on `stream`, as flashjit_forward
 * does the forward: q, k, v, o and lse as the forward had and wrote them (same shape, strides,
 * softmax_scale and `mask`, which may be null), the output's gradient d_o in, and d_q, d_k,
 * d_v written in the layouts of q, k, v (d_k / d_v summed over the query heads of a GQA
 * group). Strides as the forward's, {batch, seq, head} in elements. `workspace` is device
 * scratch of at least flashjit_backward_workspace_bytes bytes, or null (then the runtime
 * allocates it). The first call for a new alignment compiles (or loads) the backward's
 * kernels before launching. Fails with FLASHJIT_ERROR_USAGE, saying what is missing, while
 * no kernel path serves the backward for this spec and GPU. */
FLASHJIT_C_API int flashjit_backward(flashjit_kernel* kernel, const void* q, const void* k,
                                     const void* v, const void* o, const float* lse,
                                     const void* d_o, void* d_q, void* d_k, void* d_v, int batch,
                                     int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                                     const int64_t q_strides[3], const int64_t k_strides[3],
                                     const int64_t v_strides[3], const int64_t o_strides[3],
                                     const int64_t d_o_strides[3], const int64_t d_q_strides[3],
                                     const int64_t d_k_strides[3], const int64_t d_v_strides[3],
                                     float softmax_scale, const flashjit_mask_args* mask,
                                     void* workspace, size_t workspace_bytes, void* stream);

/* Into *out: the bytes of workspace flashjit_backward needs for a call with these arguments
 * (those of flashjit_backward less the workspace and the stream: the tensors' addresses and
 * strides pick the kernels, and so the size). */
FLASHJIT_C_API int flashjit_backward_workspace_bytes(
    flashjit_kernel* kernel, const void* q, const void* k, const void* v, const void* o,
    const float* lse, const void* d_o, void* d_q, void* d_k, void* d_v, int batch, int heads_q,
    int heads_kv, int seqlen_q, int seqlen_k, const int64_t q_strides[3],
    const int64_t k_strides[3], const int64_t v_strides[3], const int64_t o_strides[3],
    const int64_t d_o_strides[3], const int64_t d_q_strides[3], const int64_t d_k_strides[3],
    const int64_t d_v_strides[3], float softmax_scale, const flashjit_mask_args* mask,
    size_t* out);

/* The layout of a dense block matrix on the host: visible [batch, heads, q_blocks, k_blocks]
 * (nonzero: visible) gives counts [batch, heads, q_blocks] and indices [batch, heads,
 * q_blocks, k_blocks] (ascending key blocks, unused entries 0), so layout_max_blocks is
 * k_blocks. batch and heads may be 1 (broadcast). */
FLASHJIT_C_API int flashjit_block_layout_from_dense(const uint8_t* visible, int batch, int heads,
                                                    int q_blocks, int k_blocks, int32_t* counts,
                                                    int32_t* indices);

/* The kernel's compile reports as JSON text:
 *   {"spec": NAME, "reports": [{"kernel_name", "target",
 *     "tiles": {"block_m", "block_n", "warps", "stages"}, "registers", "shared_bytes",
 *     "spill_store_bytes", "spill_load_bytes", "stack_bytes", "compile_ms", "cache_hit",
 *     "cache_file"}, ...]}
 * (each report as `flashjit compile --json` prints it, less "spec")
 * one report per variant compiled so far. The text is owned by the kernel and valid until the
 * next call of this function on the same kernel, or its destruction. Null on failure (a null
 * kernel: see flashjit_last_error). */
FLASHJIT_C_API const char* flashjit_kernel_report_json(flashjit_kernel* kernel);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHJIT_FLASHJIT_C_H */
