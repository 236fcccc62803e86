#include "verify/backward_run.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/driver.h"
#include "verify/device_run.h"
#include "verify/half.h"
#include "verify/reference_backward.h"

namespace flashjit::verify {

namespace {

// The gradients a backward launch wrote, in logical order, with its writes outside them.
struct Gradients {
  std::vector<float> dq, dk, dv;
  int64_t outside_writes = 0;
  std::vector<uint16_t> bits;  // the whole gradient buffer, for the determinism check
};

Gradients read_gradients(const rt::DeviceBuffer& buffer, DType dtype, const Spec& spec,
                         const Shape& shape, const Placement& at) {
  OutputImage image(buffer);
  const int n = batches(shape), nq = q_rows(shape), nk = k_rows(shape);
  Gradients g;
  g.dq = image.take(dtype, at.q_offset, n, nq, shape.heads_q, spec.head_dim_qk, at.q);
  g.dk = image.take(dtype, at.k_offset, n, nk, shape.heads_kv, spec.head_dim_qk, at.k);
  g.dv = image.take(dtype, at.v_offset, n, nk, shape.heads_kv, spec.head_dim_v, at.v);
  g.outside_writes = image.outside_writes();
  g.bits = image.bits();
  return g;
}

int64_t differing_elements(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  int64_t count = 0;
  for (size_t e = 0; e < a.size(); ++e) count += a[e] != b[e];
  return count;
}

// The names of the kernels `kernel` has loaded (each load, from the disk cache or not, adds a
// report; Kernel exposes no "launches made last").
std::set<std::string> loaded_kernels(const Kernel& kernel) {
  std::set<std::string> names;
  for (const CompileReport& report : kernel.reports()) names.insert(report.kernel_name);
  return names;
}

// The kernels loaded since `before` (reports() comes in name order, not load order), or a
// note when earlier calls loaded them.
std::string kernels_loaded_since(const Kernel& kernel, const std::set<std::string>& before) {
  std::vector<std::string> names;
  for (const std::string& name : loaded_kernels(kernel))
    if (!before.contains(name)) names.push_back(name);
  if (names.empty()) return "(loaded by an earlier call)";
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string describe_failure(const BackwardRunResult& r, int64_t nondeterministic) {
  std::vector<std::string> why;
  const auto tensor = [&](const char* name, const ErrorStats& s, double bound) {
    if (s.nan) why.push_back(fmt::format("{} {} elements NaN (unwritten or computed)", s.nan, name));
    if (s.inf_mismatch) why.push_back(fmt::format("{} {} elements infinite", s.inf_mismatch, name));
    if (s.over_tolerance)
      why.push_back(fmt::format("{} {} elements beyond the bound {:.3g} (worst at {}: {:.3g})",
                                s.over_tolerance, name, bound, s.worst, s.max_abs));
  };
  tensor("dQ", r.dq, r.dq_bound);
  tensor("dK", r.dk, r.dk_bound);
  tensor("dV", r.dv, r.dv_bound);
  if (r.outside_writes)
    why.push_back(fmt::format("{} elements written outside dQ / dK / dV", r.outside_writes));
  if (nondeterministic)
    why.push_back(fmt::format("{} gradient elements differ between runs", nondeterministic));
  return fmt::format("{}", fmt::join(why, "; "));
}

// The largest error D = rowsum(dO ∘ O) carries because the backward reads O as the forward
// stored it, rounded to the element type (FlashAttention's backward does the same; the
// references take D = rowsum(P ∘ dP), exact): |δD_i| <= u Σ_d |dO_id O_id| with u the dtype's
// unit roundoff. It moves dQ_i = scale Σ_j P_ij (dP_ij - D_i) K_j by scale δD_i Σ_j P_ij K_j,
// at most scale |δD_i| max |K| (P's row sums are 1), and dK_j by Σ_i P_ij δD_i scale Q_i, at
// most max |δD| ReferenceGradients::max_p_q_column. Where rows see few keys or the head dim
// is small (head dim 1: dQ is one dot product) this is most of the error.
double d_rounding_error(const std::vector<float>& o, const std::vector<float>& d_o, int dim,
                        DType dtype) {
  const double u = std::ldexp(1.0, dtype == DType::BF16 ? -8 : -11);
  double worst = 0;
  for (size_t row = 0; row + dim <= o.size(); row += dim) {
    double sum = 0;
    for (int d = 0; d < dim; ++d) sum += std::abs(static_cast<double>(o[row + d]) * d_o[row + d]);
    worst = std::max(worst, sum);
  }
  return u * worst;
}

double max_abs(const HostView& view, int batches, int rows, int heads, int dim) {
  double m = 0;
  for (int b = 0; b < batches; ++b)
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < dim; ++d)
          m = std::max(m, std::abs(static_cast<double>(
                              view.data[b * view.stride.batch + r * view.stride.seq +
                                        h * view.stride.head + d])));
  return m;
}

}  // namespace

double gradient_error_bound(std::span<const double> reference, std::span<const double> lowp,
                            double cancellation, double lowp_floor) {
  if (reference.size() != lowp.size())
    throw std::invalid_argument("verify::gradient_error_bound: the spans differ in size");
  double lowp_error = lowp_floor, fp32_rounding = 0;
  for (size_t e = 0; e < reference.size(); ++e) {
    lowp_error = std::max(lowp_error, std::abs(lowp[e] - reference[e]));
    const float r = static_cast<float>(reference[e]);
    const float shifted = (r + 0.3f) - 0.3f;
    fp32_rounding = std::max(fp32_rounding, static_cast<double>(std::abs(shifted - r)));
  }
  return 2 * lowp_error + 2 * fp32_rounding + 2 * cancellation;
}

double rounding_floor(double spread, DType dtype) {
  const double u = std::ldexp(1.0, dtype == DType::BF16 ? -8 : -11);
  return 3 * u / std::sqrt(3.0) * spread;
}

double backward_flops(const Spec& spec, const Shape& shape) {
  return 2.5 * forward_flops(spec, shape);
}

BackwardRunResult run_backward(Runtime& runtime, const Spec& spec, const Shape& given_shape,
                               const BackwardRunOptions& options, const UserInputs* inputs) {
  check_shape(spec, given_shape);
  if (inputs) check_user_inputs(spec, given_shape, *inputs, true);
  const Placement at = place(spec, given_shape);
  const DType dtype = spec.dtype;
  BackwardRunResult result;

  RandomInputs random(options.run.seed, options.run.distribution);
  result.seed = inputs ? 0 : random.seed();
  const Shape shape = with_layout(spec, given_shape, random.seed());
  DeviceInputs device(spec, shape, at, random, inputs);
  const int n = batches(shape), nq = q_rows(shape);
  // dO in O's layout, drawn after Q, K and V (so the forward sees the inputs run_attention
  // draws from the same seed), its padding poisoned.
  std::vector<uint16_t> d_o_image(at.o_elements, kPoison16);
  fill_tensor(d_o_image, dtype, 0, n, nq, shape.heads_q, spec.head_dim_v, at.o,
              inputs ? &inputs->d_o : nullptr, random);
  rt::Driver& driver = rt::Driver::get();
  rt::DeviceBuffer d_o(d_o_image.size() * sizeof(uint16_t));
  driver.copy_to_device(d_o.ptr(), d_o_image.data(), d_o.size());

  // flashjit's own forward gives O and LSE as a training step would hold them.
  const int64_t lse_count = int64_t{n} * shape.heads_q * nq;
  const rt::DeviceBuffer o = poisoned_buffer(at.o_elements, sizeof(uint16_t));
  const rt::DeviceBuffer lse = poisoned_buffer(lse_count, sizeof(float));
  device.args.o = o.get();
  device.args.lse = reinterpret_cast<float*>(lse.get());
  std::shared_ptr<Kernel> kernel = runtime.kernel(spec);
  kernel->forward(device.args, nullptr);

  // dQ, dK and dV sit where Q, K and V sit in the input image (same offsets and strides: a
  // packed QKV input gets a packed dQKV gradient), every other element poisoned.
  const rt::DeviceBuffer grads = poisoned_buffer(at.input_elements, sizeof(uint16_t));
  const auto element = [&](int64_t offset) {
    return reinterpret_cast<void*>(grads.ptr() + offset * sizeof(uint16_t));
  };
  BackwardArgs args;
  args.forward = device.args;
  args.d_o = d_o.get();
  args.d_o_stride = at.o;
  args.d_q = element(at.q_offset);
  args.d_k = element(at.k_offset);
  args.d_v = element(at.v_offset);
  args.d_q_stride = at.q;
  args.d_k_stride = at.k;
  args.d_v_stride = at.v;
  const std::set<std::string> loaded_before = loaded_kernels(*kernel);
  kernel->backward(args, nullptr);  // the workspace the runtime allocates
  driver.synchronize();
  Gradients got = read_gradients(grads, dtype, spec, shape, at);
  result.outside_writes = got.outside_writes;
  result.kernels = kernels_loaded_since(*kernel, loaded_before);

  // The references read the same images (decoded) through the same strides.
  const std::vector<float> decoded = decode_image(dtype, device.image);
  const std::vector<float> d_o_decoded = decode_image(dtype, d_o_image);
  const AttentionProblem problem = problem_of(spec, shape);
  const HostView q{decoded.data() + at.q_offset, at.q}, k{decoded.data() + at.k_offset, at.k},
      v{decoded.data() + at.v_offset, at.v}, d_o_view{d_o_decoded.data(), at.o};
  const ReferenceGradients exact = reference_backward(problem, q, k, v, d_o_view);
  const ReferenceGradients lowp = lowp_backward(problem, q, k, v, d_o_view, dtype);
  const std::vector<float> o_values =
      OutputImage(o).take(dtype, 0, n, nq, shape.heads_q, spec.head_dim_v, at.o);
  const std::vector<float> d_o_values =
      OutputImage(d_o).take(dtype, 0, n, nq, shape.heads_q, spec.head_dim_v, at.o);
  const double d_error = d_rounding_error(o_values, d_o_values, spec.head_dim_v, dtype);
  const double d_effect_on_dq =
      d_error * problem.scale() * max_abs(k, n, k_rows(shape), shape.heads_kv, spec.head_dim_qk);
  result.dq_bound = gradient_error_bound(exact.dq, lowp.dq, exact.dq_cancellation,
                                         rounding_floor(exact.dq_rounding_spread, dtype)) +
                    2 * d_effect_on_dq;
  result.dk_bound = gradient_error_bound(exact.dk, lowp.dk, exact.dk_cancellation,
                                         rounding_floor(exact.dk_rounding_spread, dtype)) +
                    2 * d_error * exact.max_p_q_column;
  result.dv_bound = gradient_error_bound(exact.dv, lowp.dv, 0,
                                         rounding_floor(exact.dv_rounding_spread, dtype));
  result.dq = compare(got.dq, exact.dq, {.atol = result.dq_bound, .rtol = 0});
  result.dk = compare(got.dk, exact.dk, {.atol = result.dk_bound, .rtol = 0});
  result.dv = compare(got.dv, exact.dv, {.atol = result.dv_bound, .rtol = 0});

  // Later launches take a workspace of the caller's, poisoned once: a kernel must not count
  // on what it holds, neither at first nor what an earlier launch left in it.
  const size_t workspace_bytes = kernel->backward_workspace_bytes(args);
  rt::DeviceBuffer workspace;
  if (workspace_bytes > 0) {
    workspace = rt::DeviceBuffer(workspace_bytes);
    driver.memset_u8(workspace.ptr(), 0xFF, workspace.size());
    args.workspace = workspace.get();
    args.workspace_bytes = workspace_bytes;
  }
  int64_t nondeterministic = 0;
  for (int run = 1; run < options.deterministic_runs; ++run) {
    driver.memset_u8(grads.ptr(), 0xFF, grads.size());
    kernel->backward(args, nullptr);
    driver.synchronize();
    nondeterministic = std::max(
        nondeterministic,
        differing_elements(read_gradients(grads, dtype, spec, shape, at).bits, got.bits));
  }
  result.deterministic_checked = options.deterministic_runs > 1;
  result.failure = describe_failure(result, nondeterministic);
  result.passed = result.failure.empty();

  result.time_ms = median_time_ms(options.run, [&] { kernel->backward(args, nullptr); });
  if (options.run.iters > 0)
    result.tflops = backward_flops(spec, shape) / (result.time_ms * 1e-3) / 1e12;
  if (options.run.keep_outputs) {
    result.dq_values = std::move(got.dq);
    result.dk_values = std::move(got.dk);
    result.dv_values = std::move(got.dv);
  }
  return result;
}

}  // namespace flashjit::verify
