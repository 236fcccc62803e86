// The merge of two attention results over disjoint sets of keys (ring attention's step, a
// split cache): with weights w = exp(lse - max(lse_a, lse_b)), O = (w_a O_a + w_b O_b) /
// (w_a + w_b) and LSE = max + ln(w_a + w_b), which is attention over both sets at once. A
// warp takes one row (batch, head, query row), its lanes the V columns; each element is read
// and then written by one lane, so O may be O_a (in place). A row that saw no key on either
// side (both LSEs -inf) gives O = 0 and LSE = -inf.
//
// Config: Element, kHeadDimV, kWarps (rows a CTA).
#pragma once

#include "../arch/common.cuh"
#include "../attn/mask.cuh"  // the KernelConfig names its Pattern
#include "../tile/element.cuh"
#include "merge_params.cuh"

namespace fj {

template <class Cfg>
struct MergeLayout {
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kSharedBytes = 0;
};

template <class Cfg>
__device__ __forceinline__ void merge_partials(const MergeParams& p) {
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr float kLog2e = 1.4426950408889634f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long rows = static_cast<long long>(p.batch) * p.heads * p.seqlen;
  const long long row = static_cast<long long>(blockIdx.x) * Cfg::kWarps + warp;
  if (row >= rows) return;
  // row = (batch * heads + head) * seqlen + i, the LSE's layout.
  const int i = static_cast<int>(row % p.seqlen);
  const int head = static_cast<int>(row / p.seqlen % p.heads);
  const int batch = static_cast<int>(row / p.seqlen / p.heads);
  const float lse_a = p.lse_a[row], lse_b = p.lse_b[row];
  const float m = fmaxf(lse_a, lse_b);
  const float base = m == neg_inf() ? 0.f : m;
  const float w_a = exp2_approx((lse_a - base) * kLog2e);
  const float w_b = exp2_approx((lse_b - base) * kLog2e);
  const float l = w_a + w_b;
  const float inv_l = l > 0.f ? 1.f / l : 0.f;
  const Storage* a = static_cast<const Storage*>(p.o_a) + batch * p.a_batch_stride +
                     i * p.a_seq_stride + head * p.a_head_stride;
  const Storage* b = static_cast<const Storage*>(p.o_b) + batch * p.b_batch_stride +
                     i * p.b_seq_stride + head * p.b_head_stride;
  Storage* out = static_cast<Storage*>(p.o) + batch * p.o_batch_stride + i * p.o_seq_stride +
                 head * p.o_head_stride;
  for (int c = lane; c < Cfg::kHeadDimV; c += 32) {
    const float o = (w_a * Element::to_float(a[c]) + w_b * Element::to_float(b[c])) * inv_l;
    out[c] = static_cast<Storage>(Element::pack(o, 0.f) & 0xffffu);
  }
  // Every lane has read its row's LSEs above: lane 0 may now overwrite lse_a in place.
  __syncwarp();
  if (lane == 0) p.lse[row] = l > 0.f ? base + logf(l) : neg_inf();
}

}  // namespace fj
