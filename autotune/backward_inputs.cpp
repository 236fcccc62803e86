#include "autotune/backward_inputs.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "verify/half.h"

namespace flashjit::tune {
namespace {

// The unit roundoff of `dtype`: half its spacing of numbers at 1.
double unit_roundoff(DType dtype) { return dtype == DType::BF16 ? 0x1p-8 : 0x1p-11; }

// "" when the gradient `got` matches the heuristic kernel's `want`. Two correct kernels compute
// it with fp32 sums in another order (other tiles, fp32 atomics) and round once to the dtype:
// they differ by a rounding or two of each element (4u|want|) plus fp32 noise far below the
// largest element's rounding (2u max|want|). A wrong candidate (a dropped or doubled block,
// a bad mask edge) misses by a good fraction of the element, far more.
std::string differs(const char* name, DType dtype, const std::vector<uint16_t>& got,
                    const std::vector<uint16_t>& want) {
  const double u = unit_roundoff(dtype);
  double largest = 0;
  for (uint16_t w : want) largest = std::max(largest, std::fabs(double{verify::decode(dtype, w)}));
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = verify::decode(dtype, got[i]), w = verify::decode(dtype, want[i]);
    const double diff = std::fabs(g - w);
    if (!(diff <= 4 * u * std::fabs(w) + 2 * u * largest)) {  // NaN fails too
      if (bad++ == 0) first = i;
      if (!(diff <= worst)) worst = diff;
    }
  }
  if (!bad) return "";
  return fmt::format(
      "{} {} elements differ from the heuristic kernel's (first at {}, worst {:.3g}, largest "
      "{:.3g})", bad, name, first, worst, largest);
}

std::vector<uint16_t> read(const void* device, size_t elements) {
  std::vector<uint16_t> out(elements);
  rt::Driver::get().copy_to_host(out.data(), reinterpret_cast<rt::DevicePtr>(device),
                                 elements * 2);
  return out;
}

}  // namespace

BackwardArgs backward_args_of(const ForwardArgs& forward) {
  BackwardArgs a;
  a.forward = forward;
  a.d_o_stride = forward.o_stride;
  a.d_q_stride = forward.q_stride;
  a.d_k_stride = forward.k_stride;
  a.d_v_stride = forward.v_stride;
  return a;
}

BackwardTimedInputs make_backward_inputs(Kernel& kernel, const Spec& spec, const CallShape& shape,
                                         const std::vector<uint16_t>& pool) {
  BackwardTimedInputs inputs;
  inputs.forward = make_timed_inputs(spec, shape, pool);
  const size_t q_rows = size_t{1} * shape.batch * shape.seqlen_q * shape.heads_q;
  const size_t k_rows = size_t{1} * shape.batch * shape.seqlen_k * shape.heads_kv;
  inputs.dq_elements = q_rows * spec.head_dim_qk;
  inputs.dk_elements = k_rows * spec.head_dim_qk;
  inputs.dv_elements = k_rows * spec.head_dim_v;
  for (size_t s = 0; s < inputs.forward.args.size(); ++s) {
    const ForwardArgs& f = inputs.forward.args[s];
    kernel.forward(f, nullptr);
    inputs.buffers.push_back(
        upload(pool, inputs.forward.o_elements, static_cast<int>(s), PoolTensor::dO));
    inputs.buffers.emplace_back(inputs.dq_elements * 2);
    inputs.buffers.emplace_back(inputs.dk_elements * 2);
    inputs.buffers.emplace_back(inputs.dv_elements * 2);
    const size_t at = inputs.buffers.size() - 4;
    BackwardArgs a = backward_args_of(f);
    a.d_o = inputs.buffers[at].get();
    a.d_q = inputs.buffers[at + 1].get();
    a.d_k = inputs.buffers[at + 2].get();
    a.d_v = inputs.buffers[at + 3].get();
    inputs.args.push_back(a);
  }
  return inputs;
}

std::string check_against_heuristic(Kernel& kernel, BackwardTimedInputs& inputs, DType dtype,
                                    bool heuristic) {
  rt::Driver& driver = rt::Driver::get();
  const BackwardArgs& a = inputs.args[0];
  driver.memset_u8(reinterpret_cast<rt::DevicePtr>(a.d_q), 0xFF, inputs.dq_elements * 2);
  driver.memset_u8(reinterpret_cast<rt::DevicePtr>(a.d_k), 0xFF, inputs.dk_elements * 2);
  driver.memset_u8(reinterpret_cast<rt::DevicePtr>(a.d_v), 0xFF, inputs.dv_elements * 2);
  kernel.backward(a, nullptr);
  driver.synchronize();
  std::vector<uint16_t> dq = read(a.d_q, inputs.dq_elements);
  std::vector<uint16_t> dk = read(a.d_k, inputs.dk_elements);
  std::vector<uint16_t> dv = read(a.d_v, inputs.dv_elements);
  if (heuristic) {
    inputs.heuristic_dq = std::move(dq);
    inputs.heuristic_dk = std::move(dk);
    inputs.heuristic_dv = std::move(dv);
    return "";
  }
  for (std::string why : {differs("dQ", dtype, dq, inputs.heuristic_dq),
                          differs("dK", dtype, dk, inputs.heuristic_dk),
                          differs("dV", dtype, dv, inputs.heuristic_dv)})
    if (!why.empty()) return why;
  return "";
}

double time_kernel(Kernel& kernel, const BackwardTimedInputs& inputs, int warmup, int iters,
                   double hopeless_ms) {
  return time_launches(
      [&](size_t n) { kernel.backward(inputs.args[n % inputs.args.size()], nullptr); }, warmup,
      iters, hopeless_ms);
}

}  // namespace flashjit::tune
