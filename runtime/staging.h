// Tensors a TMA kernel cannot load where they lie, copied into the workspace first. A TMA copy
// must start on a 16-byte boundary (a box starting elsewhere faults on the H200: NOTES entry
// 6), so a tensor whose rows do not all start on one (head dims that are not a multiple of 8
// with the heads packed, [batch, seqlen, heads, 100]) is copied with one cuMemcpy3DAsync,
// queued before the kernel, into rows padded to 16 bytes in the same dimension order, and
// the kernel's tensor maps point at the copy. It costs a read and a write of the tensor
// (NOTES entry 30); the sm80 kernel, which loads such rows itself, serves what one 3-d copy
// cannot express. The backward copies its streamed Q and dO rows too where they are long and
// not 64-byte aligned (d136's 272-byte rows), for speed (NOTES entry 42).
#pragma once

#include <optional>
#include <vector>

#include "flashjit/flashjit.h"
#include "runtime/driver.h"
#include "runtime/operation.h"
#include "runtime/tensor_rows.h"

namespace flashjit::rt {

// One tensor's copy: the source and geometry (copy.dst is the workspace's, set by stage()),
// the copy's strides in elements and its size.
struct StagedRows {
  RowsCopy copy;
  TensorStrides stride;
  size_t bytes = 0;
};

// Do `rows` start on `align`-byte boundaries: base, and strides of dimensions of extent > 1?
bool rows_aligned(const TensorRows& rows, int element_bytes, size_t align);
// Can TMA load `rows` where they lie (16-byte aligned rows)?
bool tma_addressable(const TensorRows& rows, int element_bytes);
// The alignment a backward kernel streams `rows` at best: 64 bytes for rows longer than 256,
// else TMA's 16.
size_t streamed_row_align(const TensorRows& rows, int element_bytes);
// `rows` copied into rows padded to `align` bytes; nullopt when one 3-d copy cannot do it
// (its batch, sequence and head dimensions do not nest into two levels of evenly spaced rows).
std::optional<StagedRows> staged_rows(const TensorRows& rows, int element_bytes,
                                      size_t align = 16);

// A call's staging: for each tensor the TMA kernels load (Q, K, V, and dO for the backward),
// its copy, or none when TMA loads it where it lies. The backward also copies Q and dO rows
// longer than 256 bytes that do not start on 64-byte boundaries (streamed_row_align).
struct Staging {
  std::vector<std::optional<StagedRows>> tensors;
  bool possible = true;  // every tensor addressable in place or stageable
  bool any() const;
  // A buffer a staged tensor, in order (after the operation's own scratch in the workspace).
  std::vector<ScratchBuffer> scratch() const;
};
Staging forward_staging(const Spec& spec, const ForwardArgs& args);
Staging backward_staging(const Spec& spec, const BackwardArgs& args);

// Queues the copies into `buffers` (scratch()'s, in order) on `stream` and returns the call
// with the staged tensors' pointers and strides in place of the caller's: what the tensor
// maps are made from.
ForwardArgs stage(Driver& driver, const Staging& staging, const std::vector<void*>& buffers,
                  const ForwardArgs& args, Stream stream);
BackwardArgs stage(Driver& driver, const Staging& staging, const std::vector<void*>& buffers,
                   const BackwardArgs& args, Stream stream);

}  // namespace flashjit::rt
