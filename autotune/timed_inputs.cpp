#include "autotune/timed_inputs.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "verify/attention_run.h"
#include "verify/half.h"
#include "verify/random.h"

namespace flashjit::tune {
namespace {

// Input sets rotate until one rotation touches this many bytes, so no timed launch finds its
// tensors in L2 (60 MB on the H200; 256 MiB is over 4x any current GPU's L2). The forward's
// default shapes' one set is 256 MiB already.
constexpr size_t kRotationBytes = size_t{256} << 20;
constexpr int kMaxSets = 16;
// Set s takes Q, K, V and dO from the pool at 4s, 4s + 1, 4s + 2 and 4s + 3 times this offset.
constexpr size_t kSetOffset = 4099;
constexpr int kSetTensors = 4;
// The pool holds at most this many values besides the sets' offsets (128 MiB).
constexpr size_t kMaxPoolElements = size_t{64} << 20;

}  // namespace

double TuningClock::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool TuningClock::budget_spent(const TimingOptions& options) const {
  return options.budget_s > 0 && seconds() > options.budget_s;
}

std::string describe(const CallShape& s) {
  return fmt::format("b{} h{}/{} q{} k{}", s.batch, s.heads_q, s.heads_kv, s.seqlen_q, s.seqlen_k);
}

std::vector<uint16_t> random_pool(DType dtype, size_t largest) {
  std::vector<uint16_t> pool(std::min(largest, kMaxPoolElements) +
                             kSetTensors * kMaxSets * kSetOffset);
  verify::RandomInputs(kSeed).fill(dtype, pool);
  return pool;
}

rt::DeviceBuffer upload(const std::vector<uint16_t>& pool, size_t elements, int set,
                        PoolTensor tensor) {
  size_t offset = (size_t{kSetTensors} * set + static_cast<size_t>(tensor)) * kSetOffset;
  rt::Driver& driver = rt::Driver::get();
  rt::DeviceBuffer buffer(elements * 2);
  for (size_t done = 0; done < elements;) {
    const size_t n = std::min(elements - done, pool.size() - offset);
    driver.copy_to_device(buffer.ptr() + done * 2, pool.data() + offset, n * 2);
    done += n;
    offset = 0;
  }
  return buffer;
}

TimedInputs make_timed_inputs(const Spec& spec, const CallShape& shape,
                              const std::vector<uint16_t>& pool) {
  TimedInputs inputs;
  const size_t q_rows = size_t{1} * shape.batch * shape.seqlen_q * shape.heads_q;
  const size_t k_rows = size_t{1} * shape.batch * shape.seqlen_k * shape.heads_kv;
  const size_t q_elements = q_rows * spec.head_dim_qk, k_elements = k_rows * spec.head_dim_qk;
  const size_t v_elements = k_rows * spec.head_dim_v;
  inputs.o_elements = q_rows * spec.head_dim_v;
  inputs.lse_elements = q_rows;
  const size_t set_bytes = 2 * (q_elements + k_elements + v_elements + inputs.o_elements) +
                           4 * inputs.lse_elements;
  const int sets = static_cast<int>(
      std::clamp<size_t>((kRotationBytes + set_bytes - 1) / set_bytes, 1, kMaxSets));
  for (int s = 0; s < sets; ++s) {
    ForwardArgs a = ForwardArgs::contiguous(spec, shape.batch, shape.heads_q, shape.heads_kv,
                                            shape.seqlen_q, shape.seqlen_k);
    inputs.buffers.push_back(upload(pool, q_elements, s, PoolTensor::Q));
    inputs.buffers.push_back(upload(pool, k_elements, s, PoolTensor::K));
    inputs.buffers.push_back(upload(pool, v_elements, s, PoolTensor::V));
    inputs.buffers.emplace_back(inputs.o_elements * 2);
    inputs.buffers.emplace_back(inputs.lse_elements * 4);
    const size_t at = inputs.buffers.size() - 5;
    a.q = inputs.buffers[at].get();
    a.k = inputs.buffers[at + 1].get();
    a.v = inputs.buffers[at + 2].get();
    a.o = inputs.buffers[at + 3].get();
    a.lse = reinterpret_cast<float*>(inputs.buffers[at + 4].get());
    inputs.args.push_back(a);
  }
  return inputs;
}

namespace {

// "" when `o`/`lse` match the heuristic kernel's output. Both kernels are within the dtype's
// tolerance of the fp64 reference (verify::tolerances_for), so they are within twice it of
// each other; a wrong candidate (a dropped key block, a bad mask edge) misses by far more.
std::string differs_from_heuristic(DType dtype, const TimedInputs& inputs,
                                   const std::vector<uint16_t>& o, const std::vector<float>& lse) {
  const verify::Tolerances tol = verify::tolerances_for(dtype);
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double got = verify::decode(dtype, o[i]);
    const double want = verify::decode(dtype, inputs.heuristic_o[i]);
    const double diff = std::fabs(got - want);
    if (!(diff <= 2 * (tol.o.atol + tol.o.rtol * std::fabs(want)))) {  // NaN fails too
      if (bad++ == 0) first = i;
      if (!(diff <= worst)) worst = diff;
    }
  }
  if (bad)
    return fmt::format("{} O elements differ from the heuristic kernel's (first at {}, worst {:.3g})",
                       bad, first, worst);
  for (size_t i = 0; i < lse.size(); ++i) {
    const double diff = std::fabs(double{lse[i]} - inputs.heuristic_lse[i]);
    if (!(diff <= 2 * tol.lse.atol) && lse[i] != inputs.heuristic_lse[i])  // -inf == -inf
      return fmt::format("LSE element {} is {} where the heuristic kernel wrote {}", i, lse[i],
                         inputs.heuristic_lse[i]);
  }
  return "";
}

}  // namespace

std::string check_against_heuristic(Kernel& kernel, TimedInputs& inputs, DType dtype,
                                    bool heuristic) {
  rt::Driver& driver = rt::Driver::get();
  const ForwardArgs& a = inputs.args[0];
  driver.memset_u8(reinterpret_cast<rt::DevicePtr>(a.o), 0xFF, inputs.o_elements * 2);
  kernel.forward(a, nullptr);
  driver.synchronize();
  std::vector<uint16_t> o(inputs.o_elements);
  std::vector<float> lse(inputs.lse_elements);
  driver.copy_to_host(o.data(), reinterpret_cast<rt::DevicePtr>(a.o), o.size() * 2);
  driver.copy_to_host(lse.data(), reinterpret_cast<rt::DevicePtr>(a.lse), lse.size() * 4);
  if (!heuristic) return differs_from_heuristic(dtype, inputs, o, lse);
  inputs.heuristic_o = std::move(o);
  inputs.heuristic_lse = std::move(lse);
  return "";
}

double time_kernel(Kernel& kernel, const TimedInputs& inputs, int warmup, int iters,
                   double hopeless_ms) {
  return time_launches(
      [&](size_t n) { kernel.forward(inputs.args[n % inputs.args.size()], nullptr); }, warmup,
      iters, hopeless_ms);
}

double time_launches(const std::function<void(size_t n)>& launch, int warmup, int iters,
                     double hopeless_ms) {
  rt::Driver& driver = rt::Driver::get();
  size_t launched = 0;
  for (int n = 0; n < warmup; ++n) launch(launched++);
  const rt::Event start, stop;
  std::vector<float> times;
  for (int n = 0; n < std::max(iters, 1); ++n) {
    driver.event_record(start.get(), nullptr);
    launch(launched++);
    driver.event_record(stop.get(), nullptr);
    times.push_back(driver.event_elapsed_ms(start.get(), stop.get()));
    if (n == 0 && times[0] >= hopeless_ms) return times[0];
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

}  // namespace flashjit::tune
