// `flashjit build SPEC.yaml... --arch sm_80,sm_90a [--align natural|all|16,8,...]
//  [--tune-db FILE] -o BUNDLE`: compile every spec for every target and alignment variant
// (and every tuned tiling the DB holds for it, the backward's too with --backward) into one
// bundle file (runtime/bundle.h).
//
// Alignment variants: the runtime picks the variant from the call's pointers and strides
// (16, 8, 4 or 2 bytes). By default a bundle holds 16 bytes and the spec's natural alignment
// (that of densely packed tensors: head dim 100 in bf16 gives 8), which covers packed tensors
// and padded ones; `--align all` adds every variant. On sm_90a each alignment comes as the
// warp-specialised kernel (tensors TMA can load) and, for `all` or a list, also as the sm80
// kernel that serves the others. A call needing a variant the bundle lacks is an error under
// RuntimeOptions::require_prebuilt, otherwise a JIT compile. `--backward` adds the
// backward's kernels (D pre-pass, dK/dV, dQ) for each target and alignment, on sm_90a in the
// same TMA and non-TMA variants as the forward's.
#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "generator/plan.h"
#include "runtime/atomic_file.h"
#include "runtime/bundle.h"
#include "runtime/call_traits.h"
#include "runtime/disk_cache.h"
#include "runtime/kernel_compiler.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/operation.h"
#include "runtime/tune_db.h"
#include "runtime/tune_db_tiles.h"
#include "runtime/tune_key.h"
#include "tools/command.h"
#include "tools/target.h"

namespace flashjit::cli {
namespace {

struct BuildOptions {
  std::vector<std::string> spec_files;
  std::string archs;
  std::string align = "natural";
  std::string tune_db;
  std::string output;
  bool json = false;
  bool backward = false;
};

struct Job {
  std::string spec_file;
  gen::Plan plan;
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

std::vector<std::string> parse_targets(const std::string& text) {
  std::vector<std::string> targets = split_list(text);
  if (targets.empty()) throw Error(ErrorKind::Usage, "--arch: no target given");
  for (const std::string& target : targets) {
    if (!gen::is_known_target(target)) {
      throw Error(ErrorKind::Usage,
                  fmt::format("--arch: unknown target '{}': use sm_80, sm_86, sm_89 or sm_90a",
                              target));
    }
  }
  return targets;
}

// Alignment of densely packed tensors of this spec (row starts step by the head dims).
int natural_alignment(const Spec& spec) {
  return rt::forward_alignment(spec, ForwardArgs::contiguous(spec, 2, 2, 2, 2, 2));
}

// Whether to build the `align`-byte variant for tensors TMA can load, those it cannot, or
// both. 16-byte aligned tensors are always TMA-loadable; below that, natural builds what
// densely packed tensors need, `all` and lists build both.
std::set<bool> tma_variants_for(const Spec& spec, const std::string& option, int align) {
  if (align == 16) return {true};
  if (option == "natural") return {rt::tma_loadable(spec, ForwardArgs::contiguous(spec, 2, 2, 2, 2, 2))};
  return {true, false};
}

std::set<int, std::greater<>> alignments_for(const Spec& spec, const std::string& option) {
  if (option == "natural") return {16, natural_alignment(spec)};
  if (option == "all") return {16, 8, 4, 2};
  std::set<int, std::greater<>> out;
  for (const std::string& item : split_list(option)) {
    if (item != "16" && item != "8" && item != "4" && item != "2") {
      throw Error(ErrorKind::Usage,
                  fmt::format("--align: '{}' is not natural, all, or a list of 16, 8, 4, 2", item));
    }
    out.insert(std::stoi(item));
  }
  if (out.empty()) throw Error(ErrorKind::Usage, "--align: no alignment given");
  return out;
}

// The tilings to build: the heuristic's (nullopt), plus the tiles of every entry of `tuned` for
// this spec that `usable` accepts (on any GPU and shape bucket), each once.
template <class Entry, class Usable>
auto tilings_for(const Spec& spec, const std::vector<Entry>& tuned, Usable usable) {
  std::vector<std::optional<decltype(Entry::tiles)>> out = {std::nullopt};
  const std::string hash = tune::spec_hash(spec);
  for (const Entry& entry : tuned)
    if (entry.spec_hash == hash && usable(entry) &&
        std::find(out.begin() + 1, out.end(), entry.tiles) == out.end())
      out.push_back(entry.tiles);
  return out;
}

std::vector<Job> plan_jobs(const BuildOptions& options) {
  const std::vector<std::string> targets = parse_targets(options.archs);
  tune::TuneDbEntries tuned;
  if (!options.tune_db.empty()) tuned = tune::TuneDb(options.tune_db).load();
  std::vector<Job> jobs;
  std::set<std::string> names;  // a tuned tiling may equal the heuristic's: build it once
  for (const std::string& file : options.spec_files) {
    const gen::LocatedSpec located = gen::read_located_spec_file(file);
    const Spec& spec = located.spec;
    for (const std::string& target : targets) {
      require_forward_kernel(located, target);
      // The spec's own tiles win over the DB's at run time too.
      const auto forward_tilings =
          spec.tiles.is_auto()
              ? tilings_for(spec, tuned.tiles,
                            [&](const tune::TuneEntry& e) { return e.target == target; })
              : std::vector<std::optional<Tiles>>{std::nullopt};
      for (const std::optional<Tiles>& tiles : forward_tilings) {
        for (int align : alignments_for(spec, options.align)) {
          for (bool tma : tma_variants_for(spec, options.align, align)) {
            gen::Plan plan = gen::make_plan(spec, target, {.align_bytes = align, .tma_loadable = tma},
                                            tiles ? &*tiles : nullptr);
            if (names.insert(plan.target + "/" + plan.kernel_name).second) {
              jobs.push_back({file, std::move(plan)});
            }
          }
        }
      }
      if (!options.backward) continue;
      // The backward's tuned tiles that the runtime would use (rt::TuneDbTiles).
      const auto backward_tilings =
          tilings_for(spec, tuned.backward, [&](const tune::BackwardEntry& e) {
            return rt::backward_entry_problem(spec, target, e).empty();
          });
      for (const std::optional<BackwardTiles>& tiles : backward_tilings)
        for (int align : alignments_for(spec, options.align))
          for (bool tma : tma_variants_for(spec, options.align, align))
            for (gen::Plan& plan :
                 rt::plan_backward(spec, target, {.align_bytes = align, .tma_loadable = tma},
                                   tiles ? &*tiles : nullptr)
                     .launches)
              if (names.insert(plan.target + "/" + plan.kernel_name).second)
                jobs.push_back({file, std::move(plan)});
    }
  }
  return jobs;
}

// The compiled artifact less its PTX, which no bundle user reads.
rt::Artifact bundle_kernel(const rt::CompiledKernel& compiled) {
  rt::Artifact k = compiled.artifacts;
  k.ptx.clear();
  return k;
}

// Compiles every job, a few at a time (NVRTC compiles are single-threaded and independent).
std::vector<std::shared_ptr<const rt::CompiledKernel>> compile_all(const std::vector<Job>& jobs) {
  // No bundles here: a build compiles from the specs (or takes the disk cache's copy).
  static const rt::BundleRegistry no_bundles;
  rt::KernelCompiler compiler(rt::DiskCache::from_env(), no_bundles);
  const size_t parallel = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::shared_ptr<const rt::CompiledKernel>> out(jobs.size());
  for (size_t first = 0; first < jobs.size(); first += parallel) {
    std::vector<std::future<std::shared_ptr<const rt::CompiledKernel>>> running;
    const size_t last = std::min(jobs.size(), first + parallel);
    for (size_t i = first; i < last; ++i) {
      running.push_back(std::async(std::launch::async,
                                   [&compiler, &jobs, i] { return compiler.compile(jobs[i].plan); }));
    }
    for (size_t i = first; i < last; ++i) out[i] = running[i - first].get();
  }
  return out;
}

int run_build(const BuildOptions& options) {
  rt::check_replaceable(options.output, "bundle");  // before the compiles, not after them
  const std::vector<Job> jobs = plan_jobs(options);
  const auto compiled = compile_all(jobs);
  rt::Bundle bundle;
  bundle.generator_version = version();
  bundle.nvrtc_version = rt::nvrtc_version();
  int code = kOk;
  for (const auto& kernel : compiled) {
    bundle.kernels.push_back(bundle_kernel(*kernel));
    if (kernel->ptxas.spill_store_bytes > 0 || kernel->ptxas.spill_load_bytes > 0) {
      fmt::print(stderr, "flashjit: {} spills registers ({} bytes stored, {} loaded)\n",
                 kernel->plan.kernel_name, kernel->ptxas.spill_store_bytes,
                 kernel->ptxas.spill_load_bytes);
      code = kCheckFailed;
    }
  }
  const std::string bytes = rt::encode_bundle(bundle);
  // Atomically: a build tool reading the bundle never sees half a file.
  rt::write_file_atomically(options.output, bytes, 0644, "bundle");
  if (options.json) {
    fmt::print("{}\n", rt::bundle_manifest(bundle).dump(2));
  } else {
    for (const rt::Artifact& k : bundle.kernels) {
      fmt::print("{:<56} {:<7} a{:<2} {:>8} bytes\n", k.kernel_name, k.target, k.align_bytes,
                 k.cubin.size());
    }
    fmt::print("{}: {} kernels, {} bytes (generator {}, NVRTC {})\n", options.output,
               bundle.kernels.size(), bytes.size(), bundle.generator_version,
               bundle.nvrtc_version);
  }
  return code;
}

}  // namespace

Command add_build_command(CLI::App& parent) {
  auto options = std::make_shared<BuildOptions>();
  CLI::App* app = parent.add_subcommand(
      "build",
      "Compile specs for the given targets into one bundle file (cubins + manifest + "
      "checksum) that applications register instead of compiling at run time");
  app->add_option("specs", options->spec_files, "spec files (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  app->add_option("--arch", options->archs, "comma-separated targets, e.g. sm_80,sm_90a")
      ->required();
  app->add_option("--align", options->align,
                  "alignment variants: natural (16 and that of packed tensors; default), all "
                  "(16,8,4,2), or a list such as 16,8");
  app->add_option("--tune-db", options->tune_db,
                  "also build every tuned tiling this tune DB holds for the specs and targets "
                  "(with --backward, the backward's too)")
      ->check(CLI::ExistingFile);
  app->add_option("-o,--output", options->output, "bundle file to write")->required();
  app->add_flag("--json", options->json, "print the manifest as JSON");
  app->add_flag("--backward", options->backward,
                "also the backward's kernels (D pre-pass, dK/dV, dQ) for every target and "
                "alignment");
  return {app, [options] { return run_build(*options); }};
}

}  // namespace flashjit::cli
