#include "runtime/staging.h"

#include <algorithm>
#include <array>

#include "generator/element_types.h"

namespace flashjit::rt {
namespace {

constexpr size_t kTmaAlign = 16;
// Where a backward kernel streams a tensor's rows (Q and dO: the dK/dV kernel loads each once
// a key block), rows longer than kLongRow bytes load faster starting on 64-byte boundaries. On
// an H200, rows padded to 128 bytes made the backward's kernels 8.5% faster at d136 and 5.5% at
// d200 (16-byte aligned rows), 4% at d224 and none at d160 (64-byte aligned), most of it in the
// dK/dV kernel (bench/NOTES.md entry 42).
constexpr size_t kStreamAlign = 64;
constexpr int64_t kLongRow = 256;

// A dimension of the row view: its stride (elements) and extent; which one it is.
struct RowDim {
  int64_t stride;
  int extent;
  int64_t TensorStrides::*member;
};

// Rows evenly spaced: `extent` rows `pitch` bytes apart, made of the dimensions listed
// (innermost first).
struct Level {
  int64_t pitch = 0;
  int64_t extent = 1;
  std::vector<const RowDim*> dims;
};

}  // namespace

bool rows_aligned(const TensorRows& r, int e, size_t align) {
  const auto ok = [&](int64_t stride, int extent) {
    return extent <= 1 || static_cast<uint64_t>(stride) * e % align == 0;
  };
  return reinterpret_cast<uintptr_t>(r.base) % align == 0 && ok(r.stride.batch, r.batch) &&
         ok(r.stride.seq, r.seqlen) && ok(r.stride.head, r.heads);
}

bool tma_addressable(const TensorRows& r, int e) { return rows_aligned(r, e, kTmaAlign); }

size_t streamed_row_align(const TensorRows& r, int e) {
  return static_cast<int64_t>(r.dim) * e > kLongRow ? kStreamAlign : kTmaAlign;
}

std::optional<StagedRows> staged_rows(const TensorRows& r, int e, size_t align) {
  const int64_t row_bytes = static_cast<int64_t>(r.dim) * e;
  std::array<RowDim, 3> all = {RowDim{r.stride.head, r.heads, &TensorStrides::head},
                               RowDim{r.stride.seq, r.seqlen, &TensorStrides::seq},
                               RowDim{r.stride.batch, r.batch, &TensorStrides::batch}};
  std::vector<const RowDim*> dims;
  for (const RowDim& d : all)
    if (d.extent > 1) dims.push_back(&d);
  std::stable_sort(dims.begin(), dims.end(),
                   [](const RowDim* a, const RowDim* b) { return a->stride < b->stride; });
  // Dimensions nest into a level while each steps over the whole of the ones before it.
  std::vector<Level> levels;
  for (const RowDim* d : dims) {
    const int64_t pitch = d->stride * e;
    if (!levels.empty() && pitch == levels.back().pitch * levels.back().extent) {
      levels.back().extent *= d->extent;
    } else {
      levels.push_back({pitch, d->extent, {}});
    }
    levels.back().dims.push_back(d);
  }
  if (levels.size() > 2) return std::nullopt;
  if (levels.empty()) levels.push_back({row_bytes, 1, {}});
  if (levels.size() == 1) levels.push_back({levels[0].pitch * levels[0].extent, 1, {}});
  const Level& rows = levels[0];
  const Level& slices = levels[1];
  // Rows that overlap, or slices that are not a whole number of row pitches apart, are no
  // 3-d copy's source.
  if (rows.pitch < row_bytes || slices.pitch % rows.pitch != 0 ||
      slices.pitch / rows.pitch < rows.extent)
    return std::nullopt;

  StagedRows s;
  const size_t pitch = (static_cast<size_t>(row_bytes) + align - 1) / align * align;
  s.copy.src = reinterpret_cast<DevicePtr>(r.base);
  s.copy.row_bytes = static_cast<size_t>(row_bytes);
  s.copy.height = static_cast<size_t>(rows.extent);
  s.copy.depth = static_cast<size_t>(slices.extent);
  s.copy.src_pitch = static_cast<size_t>(rows.pitch);
  s.copy.src_height = static_cast<size_t>(slices.pitch / rows.pitch);
  s.copy.dst_pitch = pitch;
  s.copy.dst_height = s.copy.height;
  s.bytes = pitch * s.copy.height * s.copy.depth;
  // The copy is dense: each dimension steps over the ones nested inside it.
  int64_t step = static_cast<int64_t>(pitch) / e;
  for (const Level* level : {&rows, &slices})
    for (const RowDim* d : level->dims) {
      s.stride.*(d->member) = step;
      step *= d->extent;
    }
  return s;
}

bool Staging::any() const {
  return std::any_of(tensors.begin(), tensors.end(), [](const auto& t) { return t.has_value(); });
}

std::vector<ScratchBuffer> Staging::scratch() const {
  static constexpr const char* kNames[] = {"staged_q", "staged_k", "staged_v", "staged_d_o"};
  std::vector<ScratchBuffer> out;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i]) out.push_back({kNames[i], tensors[i]->bytes});
  return out;
}

namespace {

// A tensor and the row alignment its kernels load it at best (16 bytes: TMA's own rule).
struct LoadedRows {
  TensorRows rows;
  size_t align = kTmaAlign;
};

// Each tensor in place where its rows have their alignment, else copied when one 3-d copy can
// (a tensor TMA can load in place stays there when it cannot).
Staging staging_of(std::initializer_list<LoadedRows> views, int e) {
  Staging s;
  for (const LoadedRows& view : views) {
    if (rows_aligned(view.rows, e, view.align)) {
      s.tensors.emplace_back();
      continue;
    }
    s.tensors.push_back(staged_rows(view.rows, e, view.align));
    if (!s.tensors.back() && !tma_addressable(view.rows, e)) s.possible = false;
  }
  return s;
}

// Queues the copies of the staged tensors among `targets` (Q, K, V, dO in Staging's order)
// into `buffers`, one a staged tensor in order, and points each at its copy.
struct StageTarget {
  const void*& base;
  TensorStrides& stride;
};
void stage_targets(Driver& driver, const Staging& staging, const std::vector<void*>& buffers,
                   std::initializer_list<StageTarget> targets, Stream stream) {
  size_t i = 0, next = 0;
  for (const StageTarget& target : targets) {
    if (i == staging.tensors.size()) break;  // nothing staged (Staging{})
    const std::optional<StagedRows>& staged = staging.tensors[i++];
    if (!staged) continue;
    RowsCopy copy = staged->copy;
    copy.dst = reinterpret_cast<DevicePtr>(buffers.at(next++));
    driver.copy_rows_async(copy, stream);
    target.base = reinterpret_cast<const void*>(copy.dst);
    target.stride = staged->stride;
  }
}

}  // namespace

Staging forward_staging(const Spec& spec, const ForwardArgs& a) {
  return staging_of({{q_rows(spec, a)}, {k_rows(spec, a)}, {v_rows(spec, a)}},
                    gen::element_type(spec.dtype).bytes);
}

Staging backward_staging(const Spec& spec, const BackwardArgs& a) {
  const ForwardArgs& f = a.forward;
  const int e = gen::element_type(spec.dtype).bytes;
  const TensorRows q = q_rows(spec, f), d_o = d_o_rows(spec, a);
  return staging_of({{q, streamed_row_align(q, e)},
                     {k_rows(spec, f)},
                     {v_rows(spec, f)},
                     {d_o, streamed_row_align(d_o, e)}},
                    e);
}

ForwardArgs stage(Driver& driver, const Staging& staging, const std::vector<void*>& buffers,
                  const ForwardArgs& args, Stream stream) {
  ForwardArgs out = args;
  stage_targets(driver, staging, buffers,
                {{out.q, out.q_stride}, {out.k, out.k_stride}, {out.v, out.v_stride}}, stream);
  return out;
}

BackwardArgs stage(Driver& driver, const Staging& staging, const std::vector<void*>& buffers,
                   const BackwardArgs& args, Stream stream) {
  BackwardArgs out = args;
  ForwardArgs& f = out.forward;
  stage_targets(driver, staging, buffers,
                {{f.q, f.q_stride}, {f.k, f.k_stride}, {f.v, f.v_stride}, {out.d_o, out.d_o_stride}},
                stream);
  return out;
}

}  // namespace flashjit::rt
