// `flashjit run SPEC.yaml --batch B --heads H ...`: run a kernel on the GPU on random (or the
// user's) inputs, check O and LSE against the fp64 CPU reference, time it.
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/driver.h"
#include "tools/command.h"
#include "tools/npy_inputs.h"
#include "verify/attention_run.h"

namespace flashjit::cli {

namespace {

struct RunOptions {
  std::string spec_file;
  std::optional<int> batch, heads, heads_kv, seqlen_q, seqlen_k;
  int iters = 20;
  int warmup = 3;
  std::optional<uint64_t> seed;
  std::string inputs_dir, outputs_dir;
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

nlohmann::json result_json(const RunOptions& o, const Spec& spec, const verify::Shape& shape,
                           const verify::RunResult& r, const DeviceInfo& device) {
  return {{"kernel", r.kernel},
          {"spec", o.spec_file},
          {"device", device.name},
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
          {"seed", r.seed},
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
          {"iters", o.iters},
          {"time_ms", r.time_ms},
          {"tflops", r.tflops}};
}

void print_result(const RunOptions& o, const Spec& spec, const verify::Shape& shape,
                  const verify::RunResult& r, const DeviceInfo& device) {
  const verify::Tolerances tol = verify::tolerances_for(spec.dtype);
  fmt::print("kernel  {} on {}\n", r.kernel, device.name);
  fmt::print("shape   batch {}, heads {} q / {} kv, seqlen {} q / {} k, head_dim {} qk / {} v, "
             "{}{}\n",
             shape.batch, shape.heads_q, shape.heads_kv, shape.seqlen_q, shape.seqlen_k,
             spec.head_dim_qk, spec.head_dim_v, to_string(spec.dtype),
             spec.causal ? ", causal" : "");
  if (o.inputs_dir.empty())
    fmt::print("inputs  random N(0,1), seed {}\n", r.seed);
  else
    fmt::print("inputs  {}\n", o.inputs_dir);
  fmt::print("O       max abs {:.3e}  max rel {:.3e}  rel L2 {:.3e}  (atol {} rtol {} L2 {})\n",
             r.o.max_abs, r.o.max_rel, r.o.rel_l2, tol.o.atol, tol.o.rtol, tol.o_rel_l2);
  fmt::print("LSE     max abs {:.3e}  max rel {:.3e}  (atol {})\n", r.lse.max_abs, r.lse.max_rel,
             tol.lse.atol);
  fmt::print("check   {}\n", r.passed ? "PASS" : "FAIL: " + r.failure);
  if (o.iters > 0)
    fmt::print("time    {:.4f} ms (median of {})  {:.1f} TFLOP/s\n", r.time_ms, o.iters, r.tflops);
}

int run_run(const RunOptions& o) {
  const Spec spec = Spec::from_file(o.spec_file);
  std::optional<LoadedInputs> loaded;
  if (!o.inputs_dir.empty()) loaded = load_npy_inputs(o.inputs_dir, spec);
  const verify::Shape shape = loaded ? loaded->shape : shape_from_options(o);

  if (!rt::Driver::available())
    throw Error(ErrorKind::NoDevice,
                fmt::format("no GPU: {}; `flashjit compile` works without one",
                            rt::Driver::unavailable_reason()));
  Runtime runtime;
  const DeviceInfo device = runtime.device();
  verify::RunOptions run_options;
  run_options.iters = o.iters;
  run_options.warmup = o.warmup;
  run_options.seed = o.seed;
  run_options.keep_outputs = !o.outputs_dir.empty();
  const verify::RunResult result = verify::run_attention(
      runtime, spec, shape, run_options, loaded ? &loaded->values : nullptr);

  if (o.json)
    fmt::print("{}\n", result_json(o, spec, shape, result, device).dump());
  else
    print_result(o, spec, shape, result, device);
  if (!o.outputs_dir.empty()) write_npy_outputs(o.outputs_dir, spec, shape, result);
  return result.passed ? kOk : kCheckFailed;
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* app = parent.add_subcommand(
      "run",
      "Run a kernel on the GPU, check O and LSE against an fp64 CPU reference, print errors, "
      "time and TFLOP/s; exit 1 if the check fails, 3 without a GPU");
  app->add_option("spec", o->spec_file, "spec file (YAML)")->required()->check(CLI::ExistingFile);
  CLI::Option* inputs =
      app->add_option("--inputs", o->inputs_dir,
                      "read q.npy, k.npy, v.npy ([batch, seqlen, heads, head_dim], float16 or "
                      "float32, rounded to the spec's dtype) from DIR instead of random inputs")
          ->check(CLI::ExistingDirectory);
  const auto shape_option = [&](const char* name, std::optional<int>& value, const char* help) {
    app->add_option(name, value, help)->check(CLI::PositiveNumber)->excludes(inputs);
  };
  shape_option("--batch", o->batch, "batch size");
  shape_option("--heads", o->heads, "query heads");
  shape_option("--heads-kv", o->heads_kv, "key/value heads (default: --heads; GQA/MQA when fewer)");
  shape_option("--seqlen-q", o->seqlen_q, "query sequence length");
  shape_option("--seqlen-k", o->seqlen_k, "key/value sequence length");
  app->add_option("--iters", o->iters, "timed launches (median reported); 0: no timing")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--warmup", o->warmup, "untimed launches before timing")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--seed", o->seed, "seed of the random inputs (default: a fresh one)");
  app->add_option("--outputs", o->outputs_dir,
                  "write o.npy [batch, seqlen_q, heads, head_dim_v] and lse.npy "
                  "[batch, heads, seqlen_q] (float32) to DIR");
  app->add_flag("--json", o->json, "one JSON object with stable field names");
  return {app, [o] { return run_run(*o); }};
}

}  // namespace flashjit::cli
