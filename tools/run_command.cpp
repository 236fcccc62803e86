// `flashjit run SPEC.yaml --batch B --heads H ...`: run a kernel on the GPU on random (or the
// user's) inputs, check O and LSE (or, with --backward, dQ, dK and dV) against the fp64 CPU
// reference, time it.
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/driver.h"
#include "tools/command.h"
#include "tools/npy_inputs.h"
#include "verify/attention_run.h"
#include "verify/backward_run.h"
#include "verify/device_run.h"

namespace flashjit::cli {

namespace {

struct RunOptions {
  std::string spec_file;
  std::optional<int> batch, heads, heads_kv, seqlen_q, seqlen_k;
  int iters = 20;
  int warmup = 3;
  std::optional<uint64_t> seed;
  std::string inputs_dir, outputs_dir;
  bool backward = false;
  int deterministic_runs = 0;
  bool json = false;
};

verify::Shape shape_from_options(const RunOptions& o) {
  if (!o.batch || !o.heads || !o.seqlen_q || !o.seqlen_k)
    throw Error(ErrorKind::Usage,
                "run needs --batch, --heads, --seqlen-q and --seqlen-k (or --inputs DIR)");
  verify::Shape shape;
  shape.batch = *o.batch;
  shape.heads_q = *o.heads;
  shape.heads_kv = o.heads_kv.value_or(*o.heads);
  shape.seqlen_q = *o.seqlen_q;
  shape.seqlen_k = *o.seqlen_k;
  return shape;
}

// What the run was, the same for the forward and the backward.
nlohmann::json setup_json(const RunOptions& o, const Spec& spec, const verify::Shape& shape,
                          uint64_t seed, const DeviceInfo& device) {
  return {{"spec", o.spec_file},
          {"device", device.name},
          {"pass", o.backward ? "backward" : "forward"},
          {"dtype", to_string(spec.dtype)},
          {"causal", spec.causal},
          {"head_dim_qk", spec.head_dim_qk},
          {"head_dim_v", spec.head_dim_v},
          {"batch", shape.batch},
          {"heads_q", shape.heads_q},
          {"heads_kv", shape.heads_kv},
          {"seqlen_q", shape.seqlen_q},
          {"seqlen_k", shape.seqlen_k},
          {"inputs", o.inputs_dir.empty() ? "random" : o.inputs_dir},
          {"seed", seed},
          {"iters", o.iters}};
}

void print_setup(const RunOptions& o, const Spec& spec, const verify::Shape& shape,
                 const std::string& kernel, uint64_t seed, const DeviceInfo& device) {
  fmt::print("kernel  {} on {}\n", kernel, device.name);
  fmt::print("shape   batch {}, heads {} q / {} kv, seqlen {} q / {} k, head_dim {} qk / {} v, "
             "{}{}\n",
             shape.batch, shape.heads_q, shape.heads_kv, shape.seqlen_q, shape.seqlen_k,
             spec.head_dim_qk, spec.head_dim_v, to_string(spec.dtype),
             spec.causal ? ", causal" : "");
  if (o.inputs_dir.empty())
    fmt::print("inputs  random N(0,1), seed {}\n", seed);
  else
    fmt::print("inputs  {}\n", o.inputs_dir);
}

void print_outcome(const RunOptions& o, bool passed, const std::string& failure, double time_ms,
                   double tflops) {
  fmt::print("check   {}\n", passed ? "PASS" : "FAIL: " + failure);
  if (o.iters > 0)
    fmt::print("time    {:.4f} ms (median of {}{})  {:.1f} TFLOP/s\n", time_ms, o.iters,
               o.backward ? ", backward only" : "", tflops);
}

int check_forward(const RunOptions& o, const Spec& spec, const verify::Shape& shape,
                  Runtime& runtime, const verify::RunOptions& options,
                  const verify::UserInputs* inputs) {
  const DeviceInfo device = runtime.device();
  const verify::RunResult r = verify::run_attention(runtime, spec, shape, options, inputs);
  if (o.json) {
    nlohmann::json json = setup_json(o, spec, shape, r.seed, device);
    json.update({{"kernel", r.kernel},
                 {"o_max_abs", r.o.max_abs},
                 {"o_max_rel", r.o.max_rel},
                 {"o_rel_l2", r.o.rel_l2},
                 {"o_nan", r.o.nan},
                 {"lse_max_abs", r.lse.max_abs},
                 {"lse_max_rel", r.lse.max_rel},
                 {"lse_nan", r.lse.nan},
                 {"lse_inf_mismatch", r.lse.inf_mismatch},
                 {"outside_writes", r.o_outside_writes},
                 {"passed", r.passed},
                 {"failure", r.failure},
                 {"time_ms", r.time_ms},
                 {"tflops", r.tflops}});
    fmt::print("{}\n", json.dump());
  } else {
    const verify::Tolerances tol = verify::tolerances_for(spec.dtype);
    print_setup(o, spec, shape, r.kernel, r.seed, device);
    fmt::print("O       max abs {:.3e}  max rel {:.3e}  rel L2 {:.3e}  (atol {} rtol {} L2 {})\n",
               r.o.max_abs, r.o.max_rel, r.o.rel_l2, tol.o.atol, tol.o.rtol, tol.o_rel_l2);
    fmt::print("LSE     max abs {:.3e}  max rel {:.3e}  (atol {})\n", r.lse.max_abs,
               r.lse.max_rel, tol.lse.atol);
    print_outcome(o, r.passed, r.failure, r.time_ms, r.tflops);
  }
  if (!o.outputs_dir.empty()) write_npy_outputs(o.outputs_dir, spec, shape, r);
  return r.passed ? kOk : kCheckFailed;
}

int check_backward(const RunOptions& o, const Spec& spec, const verify::Shape& shape,
                   Runtime& runtime, const verify::RunOptions& options,
                   const verify::UserInputs* inputs) {
  const DeviceInfo device = runtime.device();
  const verify::BackwardRunResult r = verify::run_backward(
      runtime, spec, shape, {.run = options, .deterministic_runs = o.deterministic_runs}, inputs);
  const struct {
    const char* name;   // of the JSON fields
    const char* label;  // of the table
    const verify::ErrorStats& stats;
    double bound;
  } gradients[] = {{"dq", "dQ", r.dq, r.dq_bound},
                   {"dk", "dK", r.dk, r.dk_bound},
                   {"dv", "dV", r.dv, r.dv_bound}};
  if (o.json) {
    nlohmann::json json = setup_json(o, spec, shape, r.seed, device);
    json["kernels"] = r.kernels;
    for (const auto& g : gradients)
      json.update({{fmt::format("{}_max_abs", g.name), g.stats.max_abs},
                   {fmt::format("{}_bound", g.name), g.bound},
                   {fmt::format("{}_rel_l2", g.name), g.stats.rel_l2},
                   {fmt::format("{}_nan", g.name), g.stats.nan}});
    json.update({{"outside_writes", r.outside_writes},
                 {"deterministic_runs", r.deterministic_checked ? o.deterministic_runs : 0},
                 {"passed", r.passed},
                 {"failure", r.failure},
                 {"time_ms", r.time_ms},
                 {"tflops", r.tflops}});
    fmt::print("{}\n", json.dump());
  } else {
    print_setup(o, spec, shape, r.kernels, r.seed, device);
    for (const auto& g : gradients)
      fmt::print("{}      max abs {:.3e}  (bound {:.3e})  rel L2 {:.3e}\n", g.label,
                 g.stats.max_abs, g.bound, g.stats.rel_l2);
    fmt::print("bound   2 x the error of the same computation in {} + 2 x the fp32 rounding of "
               "the reference (FlashAttention's rule)\n", to_string(spec.dtype));
    if (r.deterministic_checked)
      fmt::print("repeat  {} runs compared bit for bit\n", o.deterministic_runs);
    print_outcome(o, r.passed, r.failure, r.time_ms, r.tflops);
  }
  if (!o.outputs_dir.empty()) write_npy_gradients(o.outputs_dir, spec, shape, r);
  return r.passed ? kOk : kCheckFailed;
}

int run_run(const RunOptions& o) {
  const Spec spec = Spec::from_file(o.spec_file);
  std::optional<LoadedInputs> loaded;
  if (!o.inputs_dir.empty()) {
    loaded = load_npy_inputs(o.inputs_dir, spec);
    if (o.backward) load_npy_output_gradient(o.inputs_dir, spec, *loaded);
  }
  const verify::Shape shape = loaded ? loaded->shape : shape_from_options(o);
  // Everything that needs no GPU first: a bad shape is a usage error on every machine.
  verify::check_shape(spec, shape);

  if (!rt::Driver::available())
    throw Error(ErrorKind::NoDevice,
                fmt::format("no GPU: {}; `flashjit compile` works without one",
                            rt::Driver::unavailable_reason()));
  Runtime runtime;
  verify::RunOptions options;
  options.iters = o.iters;
  options.warmup = o.warmup;
  options.seed = o.seed;
  options.keep_outputs = !o.outputs_dir.empty();
  const verify::UserInputs* inputs = loaded ? &loaded->values : nullptr;
  return o.backward ? check_backward(o, spec, shape, runtime, options, inputs)
                    : check_forward(o, spec, shape, runtime, options, inputs);
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* app = parent.add_subcommand(
      "run",
      "Run a kernel on the GPU, check O and LSE (with --backward: dQ, dK, dV) against an fp64 "
      "CPU reference, print errors, time and TFLOP/s; exit 1 if the check fails, 2 for a bad "
      "spec or shape, 3 without a GPU");
  app->add_option("spec", o->spec_file, "spec file (YAML)")->required()->check(CLI::ExistingFile);
  CLI::Option* inputs =
      app->add_option("--inputs", o->inputs_dir,
                      "read q.npy, k.npy, v.npy ([batch, seqlen, heads, head_dim], float16 or "
                      "float32, rounded to the spec's dtype), and with --backward do.npy (O's "
                      "shape [batch, seqlen_q, heads, head_dim_v]), from DIR instead of random "
                      "inputs")
          ->check(CLI::ExistingDirectory);
  const auto shape_option = [&](const char* name, std::optional<int>& value, const char* help) {
    app->add_option(name, value, help)->check(CLI::PositiveNumber)->excludes(inputs);
  };
  shape_option("--batch", o->batch, "batch size");
  shape_option("--heads", o->heads, "query heads");
  shape_option("--heads-kv", o->heads_kv, "key/value heads (default: --heads; GQA/MQA when fewer)");
  shape_option("--seqlen-q", o->seqlen_q, "query sequence length");
  shape_option("--seqlen-k", o->seqlen_k, "key/value sequence length");
  CLI::Option* backward = app->add_flag(
      "--backward", o->backward,
      "check and time the backward instead: flashjit's forward gives O and LSE, then dQ, dK, dV "
      "are compared with the fp64 reference under FlashAttention's gradient rule (max error <= "
      "2 x that of the same computation in the low dtype + 2 x the fp32 rounding of the "
      "reference; README says what dQ, dK and dV add to it); the time is the backward's alone, "
      "TFLOP/s count 2.5 x the forward's FLOPs");
  app->add_option("--deterministic-runs", o->deterministic_runs,
                  "with --backward: run the backward N times and require bitwise-equal dQ, dK, "
                  "dV")
      ->check(CLI::PositiveNumber)
      ->needs(backward);
  app->add_option("--iters", o->iters, "timed launches (median reported); 0: no timing")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--warmup", o->warmup, "untimed launches before timing")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--seed", o->seed, "seed of the random inputs (default: a fresh one)");
  app->add_option("--outputs", o->outputs_dir,
                  "write o.npy [batch, seqlen_q, heads, head_dim_v] and lse.npy "
                  "[batch, heads, seqlen_q] (with --backward: dq.npy, dk.npy, dv.npy in Q's, K's "
                  "and V's shapes), float32, to DIR");
  app->add_flag("--json", o->json, "one JSON object with stable field names");
  return {app, [o] { return run_run(*o); }};
}

}  // namespace flashjit::cli
