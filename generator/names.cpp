// Spellings of the public enums, the generator version, and the dense-layout strides.
#include "flashjit/flashjit.h"

namespace flashjit {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Spec: return "spec";
    case ErrorKind::Shape: return "shape";
    case ErrorKind::Compile: return "compile";
    case ErrorKind::Driver: return "driver";
    case ErrorKind::NoDevice: return "no-device";
    case ErrorKind::Cache: return "cache";
    case ErrorKind::Io: return "io";
    case ErrorKind::Usage: return "usage";
  }
  return "unknown";
}

// These spellings are the YAML values: the parser matches against them.
const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
  }
  return "unknown";
}

const char* to_string(DecodeMode mode) {
  switch (mode) {
    case DecodeMode::Auto: return "auto";
    case DecodeMode::Always: return "always";
    case DecodeMode::Never: return "never";
  }
  return "unknown";
}

const char* to_string(Arch arch) {
  switch (arch) {
    case Arch::Auto: return "auto";
    case Arch::Sm80: return "sm80";
    case Arch::Sm90a: return "sm90a";
  }
  return "unknown";
}

const char* to_string(MaskKind mask) {
  switch (mask) {
    case MaskKind::None: return "none";
    case MaskKind::SlidingWindow: return "sliding_window";
    case MaskKind::BlockSparse: return "block_sparse";
    case MaskKind::Pattern: return "pattern";
  }
  return "unknown";
}

const char* to_string(PatternKind kind) {
  switch (kind) {
    case PatternKind::None: return "none";
    case PatternKind::Local: return "local";
    case PatternKind::Strided: return "strided";
    case PatternKind::GlobalLocal: return "global_local";
  }
  return "unknown";
}

// Bump when the generated code changes in a way the rendered source does not show
// (it is part of every cache key).
const char* version() { return "0.1.0"; }

ForwardArgs ForwardArgs::contiguous(const Spec& spec, int batch, int heads_q, int heads_kv,
                                    int seqlen_q, int seqlen_k) {
  ForwardArgs args;
  args.batch = batch;
  args.heads_q = heads_q;
  args.heads_kv = heads_kv;
  args.seqlen_q = seqlen_q;
  args.seqlen_k = seqlen_k;
  // [batch, seq, heads, dim] packed densely: each stride is the size of everything inside it.
  auto dense = [](int64_t seqlen, int64_t heads, int64_t dim) {
    return TensorStrides{seqlen * heads * dim, heads * dim, dim};
  };
  args.q_stride = dense(seqlen_q, heads_q, spec.head_dim_qk);
  args.k_stride = dense(seqlen_k, heads_kv, spec.head_dim_qk);
  args.v_stride = dense(seqlen_k, heads_kv, spec.head_dim_v);
  args.o_stride = dense(seqlen_q, heads_q, spec.head_dim_v);
  return args;
}

ForwardArgs ForwardArgs::varlen(const Spec& spec, int batch, int heads_q, int heads_kv,
                                int max_seqlen_q, int max_seqlen_k, int total_q, int total_k) {
  ForwardArgs args = contiguous(spec, batch, heads_q, heads_kv, max_seqlen_q, max_seqlen_k);
  // Sequences follow each other in one [total, heads, dim] tensor: no batch stride.
  args.q_stride.batch = args.k_stride.batch = args.v_stride.batch = args.o_stride.batch = 0;
  args.total_q = total_q;
  args.total_k = total_k;
  return args;
}

}  // namespace flashjit
