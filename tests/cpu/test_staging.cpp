// The staging of tensors TMA cannot address (runtime/staging.h): which tensors are copied, the
// 3-d copy's geometry, and the strides the tensor maps then read. The copies themselves run
// on the GPU suite's d100 and odd-dim cases (forward and backward against fp64).
#include <doctest/doctest.h>

#include <cstdint>

#include "runtime/staging.h"

namespace flashjit {
namespace {

const void* at(uintptr_t address) { return reinterpret_cast<const void*>(address); }

// [batch, seqlen, heads, dim] with the given element strides, bf16.
rt::TensorRows rows(int batch, int seqlen, int heads, int dim, TensorStrides stride,
                    uintptr_t base = uintptr_t{1} << 20) {
  return {at(base), stride, batch, seqlen, heads, dim};
}

}  // namespace

TEST_CASE("staging: TMA addresses 16-byte rows in place; others are copied into 16-byte rows") {
  CHECK(rt::tma_addressable(rows(2, 300, 16, 128, {300 * 16 * 128, 16 * 128, 128}), 2));
  CHECK(rt::tma_addressable(rows(2, 300, 3, 72, {300 * 3 * 72, 3 * 72, 72}), 2));
  CHECK_FALSE(rt::tma_addressable(rows(2, 300, 20, 100, {300 * 2000, 2000, 100}), 2));
  CHECK_FALSE(rt::tma_addressable(rows(1, 300, 1, 128, {0, 128, 0}, (uintptr_t{1} << 20) + 8), 2));
  // A dimension of extent 1 is never stepped along: its stride does not matter.
  CHECK(rt::tma_addressable(rows(1, 300, 1, 128, {7, 128, 3}), 2));
}

TEST_CASE("staging: packed heads of 200 bytes are one run of rows, copied to 208-byte rows") {
  const auto s = rt::staged_rows(rows(2, 1000, 20, 100, {1000 * 2000, 2000, 100}), 2);
  REQUIRE(s.has_value());
  CHECK(s->copy.row_bytes == 200);
  CHECK(s->copy.src_pitch == 200);
  CHECK(s->copy.dst_pitch == 208);
  CHECK(s->copy.height == 2 * 1000 * 20);
  CHECK(s->copy.depth == 1);
  CHECK(s->stride.head == 104);
  CHECK(s->stride.seq == 20 * 104);
  CHECK(s->stride.batch == 1000 * 20 * 104);
  CHECK(s->bytes == size_t{208} * 2 * 1000 * 20);
  CHECK(rt::tma_addressable(rows(2, 1000, 20, 100, s->stride, 1 << 20), 2));
}

TEST_CASE("staging: a [batch, heads, seqlen, dim] tensor keeps its dimension order") {
  const auto s = rt::staged_rows(rows(3, 77, 5, 59, {5 * 77 * 59, 59, 77 * 59}), 2);
  REQUIRE(s.has_value());
  CHECK(s->copy.row_bytes == 118);
  CHECK(s->copy.dst_pitch == 128);
  CHECK(s->copy.height == 3 * 5 * 77);
  CHECK(s->stride.seq == 64);
  CHECK(s->stride.head == 77 * 64);
  CHECK(s->stride.batch == 5 * 77 * 64);
}

TEST_CASE("staging: Q of a packed QKV tensor is two levels, heads within rows of three") {
  // [batch 2, seqlen 300, 3, heads 8, 100]: Q's heads are 200 bytes apart, its rows 4800.
  const auto s = rt::staged_rows(rows(2, 300, 8, 100, {300 * 2400, 2400, 100}), 2);
  REQUIRE(s.has_value());
  CHECK(s->copy.height == 8);
  CHECK(s->copy.src_pitch == 200);
  CHECK(s->copy.src_height == 24);  // the slices: 3 x 8 rows of 200 bytes apart
  CHECK(s->copy.depth == 2 * 300);
  CHECK(s->copy.dst_height == 8);
  CHECK(s->stride.head == 104);
  CHECK(s->stride.seq == 8 * 104);
  CHECK(s->stride.batch == 300 * 8 * 104);
}

TEST_CASE("staging: three levels of rows, or overlapping rows, are no single copy") {
  CHECK_FALSE(rt::staged_rows(rows(2, 300, 20, 100, {300 * 2004 + 12, 2004, 100}), 2));
  CHECK_FALSE(rt::staged_rows(rows(2, 300, 20, 100, {300 * 2000, 2000, 50}), 2));
}

TEST_CASE("staging: a call stages only what TMA cannot load, a buffer each, in order") {
  Spec spec;
  spec.name = "d100";
  spec.head_dim_qk = spec.head_dim_v = 100;
  ForwardArgs a = ForwardArgs::contiguous(spec, 2, 20, 4, 300, 500);
  a.q = a.k = a.v = at(uintptr_t{1} << 20);
  rt::Staging s = rt::forward_staging(spec, a);
  CHECK(s.possible);
  CHECK(s.any());
  REQUIRE(s.scratch().size() == 3);
  CHECK(s.scratch()[0].name == "staged_q");
  CHECK(s.scratch()[0].bytes == size_t{208} * 2 * 300 * 20);
  CHECK(s.scratch()[2].bytes == size_t{208} * 2 * 500 * 4);

  spec.head_dim_qk = spec.head_dim_v = 128;
  ForwardArgs b = ForwardArgs::contiguous(spec, 2, 20, 4, 300, 500);
  b.q = b.k = b.v = at(uintptr_t{1} << 20);
  CHECK_FALSE(rt::forward_staging(spec, b).any());
  b.v = at((uintptr_t{1} << 20) + 2);
  s = rt::forward_staging(spec, b);
  REQUIRE(s.scratch().size() == 1);
  CHECK(s.scratch()[0].name == "staged_v");

  BackwardArgs g;
  g.forward = b;
  g.forward.v = at(uintptr_t{1} << 20);
  g.d_o = at((uintptr_t{1} << 21) + 4);
  g.d_o_stride = b.o_stride;
  s = rt::backward_staging(spec, g);
  REQUIRE(s.scratch().size() == 1);
  CHECK(s.scratch()[0].name == "staged_d_o");
}

}  // namespace flashjit

namespace flashjit {

TEST_CASE("staging: the backward copies long Q and dO rows off 64-byte boundaries, not K or V") {
  Spec spec;
  spec.name = "d136";
  spec.head_dim_qk = spec.head_dim_v = 136;
  BackwardArgs g;
  g.forward = ForwardArgs::contiguous(spec, 2, 15, 5, 300, 500);
  g.forward.q = g.forward.k = g.forward.v = at(uintptr_t{1} << 20);
  g.d_o = at(uintptr_t{1} << 21);
  g.d_o_stride = g.forward.o_stride;
  rt::Staging s = rt::backward_staging(spec, g);
  CHECK(s.possible);
  REQUIRE(s.scratch().size() == 2);
  CHECK(s.scratch()[0].name == "staged_q");
  CHECK(s.scratch()[1].name == "staged_d_o");
  REQUIRE(s.tensors[0].has_value());
  CHECK(s.tensors[0]->copy.row_bytes == 272);
  CHECK(s.tensors[0]->copy.dst_pitch == 320);  // 272 bytes rounded up to 64
  CHECK(s.tensors[0]->stride.head == 160);
  CHECK(s.scratch()[0].bytes == size_t{320} * 2 * 300 * 15);
  // The forward loads them in place (16-byte rows).
  CHECK_FALSE(rt::forward_staging(spec, g.forward).any());

  // Rows already on 64-byte boundaries (head strides of 160 elements) stay in place.
  const TensorStrides padded{300 * 15 * 160, 15 * 160, 160};
  g.forward.q_stride = g.d_o_stride = padded;
  CHECK_FALSE(rt::backward_staging(spec, g).any());

  // Rows TMA can load that one 3-d copy cannot gather stay in place as well.
  g.forward.q_stride = {300 * 15 * 192 + 64, 15 * 192, 136};
  s = rt::backward_staging(spec, g);
  CHECK(s.possible);
  CHECK_FALSE(s.any());

  // Rows of 256 bytes or fewer (d100's 200) take the 16-byte padding only.
  spec.head_dim_qk = spec.head_dim_v = 100;
  g.forward = ForwardArgs::contiguous(spec, 2, 15, 5, 300, 500);
  g.forward.q = g.forward.k = g.forward.v = at(uintptr_t{1} << 20);
  g.d_o_stride = g.forward.o_stride;
  s = rt::backward_staging(spec, g);
  REQUIRE(s.tensors[0].has_value());
  CHECK(s.tensors[0]->copy.dst_pitch == 208);
  CHECK(s.scratch().size() == 4);
}

}  // namespace flashjit
