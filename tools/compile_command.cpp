// `flashjit compile SPEC.yaml... [--arch T] [--json] [--align B] [--backward | --decode]`: compile
// NVRTC (no GPU needed) and report what ptxas made of each kernel.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/compile_report_json.h"
#include "tools/command.h"
#include "tools/target.h"

namespace flashjit::cli {

namespace {

struct CompileOptions {
  std::vector<std::string> spec_files;
  std::string arch;
  bool json = false;
  int align = 16;
  bool backward = false;
  bool decode = false;
};

std::string tiles_text(const Tiles& t) {
  return fmt::format("m{}n{}w{}s{}", t.block_m, t.block_n, t.warps, t.stages);
}

// One line per kernel: the report's one JSON view (its field names are a stable interface)
// and the spec file it came from.
nlohmann::json report_json(const std::string& spec_file, const CompileReport& r) {
  nlohmann::json json = rt::compile_report_json(r);
  json["spec"] = spec_file;
  return json;
}

void print_table_header() {
  fmt::print("{:<56} {:<7} {:<12} {:>5} {:>8} {:>12} {:>11} {:<5}\n", "kernel", "target",
             "tiles", "regs", "shared", "spill st/ld", "compile ms", "cache");
}

void print_table_row(const CompileReport& r) {
  fmt::print("{:<56} {:<7} {:<12} {:>5} {:>8} {:>12} {:>11.1f} {:<5}\n", r.kernel_name,
             r.target, tiles_text(r.tiles), r.registers, r.shared_bytes,
             fmt::format("{}/{}", r.spill_store_bytes, r.spill_load_bytes), r.compile_ms,
             r.cache_hit ? "hit" : "miss");
}

int run_compile(const CompileOptions& options) {
  Runtime runtime;
  int code = kOk;
  if (!options.json) print_table_header();
  for (const std::string& file : options.spec_files) {
    try {
      const gen::LocatedSpec located = gen::read_located_spec_file(file);
      const Spec& spec = located.spec;
      const std::string target = resolve_target(spec, options.arch);
      if (!options.backward) require_forward_kernel(located, target);
      const std::vector<CompileReport> reports =
          options.backward
              ? runtime.compile_backward(spec, target, options.align)
          : options.decode
              ? runtime.compile_decode(spec, target, options.align)
              : std::vector<CompileReport>{runtime.compile(spec, target, options.align)};
      for (const CompileReport& report : reports) {
        if (options.json)
          fmt::print("{}\n", report_json(file, report).dump());
        else
          print_table_row(report);
        if (report.spill_store_bytes > 0 || report.spill_load_bytes > 0) {
          fmt::print(stderr, "flashjit: {} spills registers ({} bytes stored, {} loaded)\n",
                     report.kernel_name, report.spill_store_bytes, report.spill_load_bytes);
          code = std::max(code, static_cast<int>(kCheckFailed));
        }
      }
    } catch (const Error& error) {
      code = std::max(code, report_error(error));
    }
    std::fflush(stdout);  // each kernel's line appears as it is compiled
  }
  return code;
}

}  // namespace

Command add_compile_command(CLI::App& parent) {
  auto options = std::make_shared<CompileOptions>();
  CLI::App* app = parent.add_subcommand(
      "compile",
      "Compile specs with NVRTC (no GPU needed) and report registers, shared memory, spills, "
      "compile time and cache hit/miss; exit 1 if a kernel spills");
  app->add_option("specs", options->spec_files, "spec files (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  add_arch_option(*app, options->arch);
  app->add_flag("--json", options->json, "one JSON object per line and kernel");
  app->add_option("--align", options->align,
                  "compile the kernels a call gets whose tensor rows start at multiples of "
                  "this many bytes: 16 (aligned tensors, and packed ones of head dims that are "
                  "multiples of 8), 8, 4 or 2 (packed tensors of other head dims: d100 gives "
                  "8, d59 2)")
      ->check(CLI::IsMember({16, 8, 4, 2}))
      ->capture_default_str();
  app->add_flag("--backward", options->backward,
                "compile the backward's kernels (D pre-pass, dK/dV, dQ) instead of the forward");
  app->add_flag("--decode", options->decode,
                "compile decode's kernels (the split kernel for 8..64 packed rows, dense and "
                "paged caches, the combine) and the merge instead of the forward; only the "
                "merge for block masks")
      ->excludes("--backward");
  return {app, [options] { return run_compile(*options); }};
}

}  // namespace flashjit::cli
