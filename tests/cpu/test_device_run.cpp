// The host side of the checked runs (verify/device_run.h): where each tensor sits, the shape
// checks that must come before any GPU call, and the inputs written into an image.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "verify/device_run.h"
#include "verify/half.h"

namespace flashjit::verify {

namespace {

Spec spec_of(const std::string& yaml) { return Spec::from_yaml(yaml, "test.yaml"); }

std::string shape_error(const Spec& spec, const Shape& shape) {
  try {
    check_shape(spec, shape);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Shape);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("device run: placement of contiguous, padded-head and packed QKV tensors") {
  const Spec spec = spec_of("head_dim_qk: 40\nhead_dim_v: 24\n");
  Shape shape;
  shape.batch = 2;
  shape.heads_q = 4;
  shape.heads_kv = 2;
  shape.seqlen_q = 3;
  shape.seqlen_k = 5;
  const Placement dense = place(spec, shape);
  CHECK(dense.q.head == 40);
  CHECK(dense.q.seq == 4 * 40);
  CHECK(dense.q.batch == 3 * 4 * 40);
  CHECK(dense.v.seq == 2 * 24);
  CHECK(dense.k_offset % 64 == 0);  // each tensor starts on a 128-byte boundary
  CHECK(dense.k_offset >= 2 * dense.q.batch);
  CHECK(dense.v_offset >= dense.k_offset + 2 * dense.k.batch);
  CHECK(dense.input_elements == dense.v_offset + 2 * dense.v.batch);
  CHECK(dense.o_elements == 2 * 3 * 4 * 24);

  shape.layout = Layout::PaddedHeads;
  shape.head_pad = 3;
  const Placement padded = place(spec, shape);
  CHECK(padded.q.head == 43);
  CHECK(padded.o.head == 27);

  const Spec square = spec_of("head_dim: 16\n");
  shape.layout = Layout::PackedQkv;
  shape.seqlen_k = 3;
  const Placement packed = place(square, shape);
  CHECK(packed.q.seq == (4 + 2 * 2) * 16);  // one row holds every Q, K and V head
  CHECK(packed.k_offset == 4 * 16);
  CHECK(packed.v_offset == (4 + 2) * 16);
  shape.seqlen_k = 5;
  CHECK(shape_error(square, shape).find("packed QKV layout needs seqlen_q == seqlen_k") !=
        std::string::npos);
}

TEST_CASE("device run: shape checks that need no GPU") {
  const Spec spec = spec_of("head_dim: 8\n");
  Shape shape;
  CHECK(shape_error(spec, shape).empty());
  shape.heads_q = 3;
  shape.heads_kv = 2;
  CHECK(shape_error(spec, shape).find("heads_q a multiple of heads_kv") != std::string::npos);
  Shape varlen = varlen_shape(2, 1, {3, 0}, {4, 2});
  CHECK(shape_error(spec, varlen).empty());
  varlen.seqlen_q = 7;  // not the longest sequence
  CHECK(shape_error(spec, varlen).find("varlen shape") != std::string::npos);
  Shape stray = shape;
  stray.heads_kv = 1;
  stray.block_visible = {1};
  CHECK(shape_error(spec, stray).find("a block layout is given") != std::string::npos);
}

TEST_CASE("device run: tensors fill their strided places; padding stays poison") {
  const Spec spec = spec_of("head_dim: 2\ndtype: fp16\n");
  const TensorStrides strides{.batch = 12, .seq = 6, .head = 3};  // [1, 2, 2, 2] padded by 1
  std::vector<uint16_t> image(1 + 12, kPoison16);
  const std::vector<float> user = {1, 2, 3, 4, 5, 6, 7, 8};
  RandomInputs random(1);
  fill_tensor(image, spec.dtype, 1, 1, 2, 2, 2, strides, &user, random);
  const std::vector<float> decoded = decode_image(spec.dtype, image);
  CHECK(std::isnan(decoded[0]));  // before the offset
  const std::vector<float> want = {1, 2, NAN, 3, 4, NAN, 5, 6, NAN, 7, 8, NAN};
  for (size_t e = 0; e < want.size(); ++e) {
    INFO("element ", e);
    if (std::isnan(want[e]))
      CHECK(std::isnan(decoded[1 + e]));
    else
      CHECK(decoded[1 + e] == want[e]);
  }
}

TEST_CASE("device run: a block_sparse spec without a layout gets one drawn from the seed") {
  const Spec spec = spec_of("head_dim: 64\nmask: {block_sparse: {block_q: 128, block_k: 64}}\n");
  Shape shape;
  shape.seqlen_q = 300;
  shape.seqlen_k = 500;
  const Shape drawn = with_layout(spec, shape, 7);
  const size_t blocks = static_cast<size_t>((300 + spec.block_q - 1) / spec.block_q) *
                        ((500 + spec.block_k - 1) / spec.block_k);
  CHECK(drawn.block_visible.size() == blocks);
  CHECK(with_layout(spec, shape, 7).block_visible == drawn.block_visible);
  const AttentionProblem problem = problem_of(spec, drawn);
  CHECK(problem.block_q == spec.block_q);
  CHECK(problem.block_visible == drawn.block_visible);
  CHECK(with_layout(spec_of("head_dim: 64\n"), shape, 7).block_visible.empty());
}

}  // namespace flashjit::verify
