// What a checked forward run (attention_run.cpp) and a checked backward run
// (backward_run.cpp) share: the shape checks, where each tensor sits in device memory, the
// inputs on the device with ForwardArgs pointing at them, outputs poisoned with NaN and read
// back, and the CUDA-event timing.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "flashjit/flashjit.h"
#include "runtime/driver.h"
#include "verify/attention_run.h"
#include "verify/random.h"
#include "verify/reference.h"

namespace flashjit::verify {

bool is_varlen(const Shape& shape);
// A varlen batch is one "batch" of packed rows (total tokens); a fixed one has `batch` of
// seqlen rows each.
int batches(const Shape& shape);
int q_rows(const Shape& shape);
int k_rows(const Shape& shape);

// Where Q, K, V (one input buffer) and O (one output buffer) live, in elements. The backward
// run lays dQ, dK, dV out the same way in a gradient buffer of their own, and dO like O.
struct Placement {
  int64_t q_offset = 0, k_offset = 0, v_offset = 0;
  TensorStrides q, k, v, o;
  int64_t input_elements = 0, o_elements = 0;
};
// Throws Error(Shape) if the shape does not fit its layout.
Placement place(const Spec& spec, const Shape& shape);

// Calls fn(element offset) for every element of a [batch, seq, heads, dim] tensor, in the
// order of its contiguous layout.
template <class Fn>
void for_each_element(int batch, int seqlen, int heads, int dim, const TensorStrides& s, Fn fn) {
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < seqlen; ++i)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < dim; ++d) fn(b * s.batch + i * s.seq + h * s.head + d);
}

// Throws Error(Shape) for sizes below 1, heads_q not a multiple of heads_kv, varlen lengths
// or a block matrix that do not fit, or a layout the shape cannot take; needs no GPU.
void check_shape(const Spec& spec, const Shape& shape);
// Throws Error(Shape) if the user's q, k, v (and d_o when `with_d_o`) do not hold the
// shape's element counts.
void check_user_inputs(const Spec& spec, const Shape& shape, const UserInputs& inputs,
                       bool with_d_o);

// The shape with a random block layout (density 1/2, one for all batches and heads) when a
// block_sparse spec has none; drawn from its own generator so the inputs stay those of `seed`.
Shape with_layout(const Spec& spec, Shape shape, uint64_t seed);
AttentionProblem problem_of(const Spec& spec, const Shape& shape);

// Fills the tensor [batches, rows, heads, dim] at `offset` of a 16-bit image: the user's
// values in contiguous order, or the next random ones.
void fill_tensor(std::vector<uint16_t>& image, DType dtype, int64_t offset, int batch, int rows,
                 int heads, int dim, const TensorStrides& strides, const std::vector<float>* user,
                 RandomInputs& random);
// Each 16-bit element decoded to float (poison stays NaN).
std::vector<float> decode_image(DType dtype, const std::vector<uint16_t>& image);

// The forward's inputs on the device: Q, K, V written into one image (padding and gaps left
// poisoned, so a kernel that reads them makes NaN), the int32 side inputs (varlen prefix sums,
// the block-sparse layout), and ForwardArgs pointing at them; O and LSE are the caller's.
struct DeviceInputs {
  DeviceInputs(const Spec& spec, const Shape& shape, const Placement& at, RandomInputs& random,
               const UserInputs* user);
  std::vector<uint16_t> image;
  rt::DeviceBuffer input, side;
  ForwardArgs args;
};

// Poisoned elements after each output: a kernel writing past the end of one is caught.
inline constexpr int64_t kGuardElements = 256;

// An output buffer of `elements` values of `element_bytes` each plus kGuardElements, every
// byte 0xFF (NaN in fp16, bf16 and fp32 alike) before the kernel writes it.
rt::DeviceBuffer poisoned_buffer(int64_t elements, size_t element_bytes);

// A 16-bit output image read back from the device: take() decodes one logical tensor and
// marks its elements; outside_writes() then counts the unmarked ones that are no longer poison.
class OutputImage {
 public:
  explicit OutputImage(const rt::DeviceBuffer& buffer);
  std::vector<float> take(DType dtype, int64_t offset, int batch, int rows, int heads, int dim,
                          const TensorStrides& strides);
  int64_t outside_writes() const;
  const std::vector<uint16_t>& bits() const { return bits_; }

 private:
  std::vector<uint16_t> bits_;
  std::vector<bool> logical_;
};

// The median of options.iters launches timed with CUDA events on the default stream, after
// options.warmup untimed ones; 0 when iters is 0.
double median_time_ms(const RunOptions& options, const std::function<void()>& launch);

}  // namespace flashjit::verify
