// `flashjit check SPEC.yaml... [--arch T]`: parse and validate specs, print each resolved,
// then which forward kernel each target gets.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "generator/plan.h"
#include "generator/spec_targets.h"
#include "tools/command.h"
#include "tools/target.h"

namespace flashjit::cli {

namespace {

struct CheckOptions {
  std::vector<std::string> spec_files;
  std::string arch;
};

// One comment line a target after the printout, so that the output still reads as the
// spec: "# sm_80: sm80 kernel, tiles m128n64w4s3, 98304 bytes of shared memory", or
// "# sm_86: no kernel" with the located error on stderr. Returns the exit code.
int check_target(const gen::LocatedSpec& spec, const std::string& target) {
  if (auto problem = gen::target_problem(spec.spec, target)) {
    fmt::print("# {}: no kernel (see the error)\n", target);
    return report_error(gen::located_error(spec, *problem));
  }
  const gen::Plan plan = gen::make_plan(spec.spec, target);
  fmt::print("# {}: {} kernel, tiles {}, {} bytes of shared memory\n", target, plan.path->label,
             plan.path->tiles_label(plan.tiles), plan.shared_bytes);
  return kOk;
}

int run_check(const CheckOptions& options) {
  int code = kOk;
  for (const std::string& file : options.spec_files) {
    try {
      const gen::LocatedSpec spec = gen::read_located_spec_file(file);
      if (options.spec_files.size() > 1) fmt::print("# {}\n", file);
      fmt::print("{}", spec.spec.to_yaml());
      const std::vector<std::string> targets =
          options.arch.empty() ? gen::allowed_targets(spec.spec)
                               : std::vector<std::string>{options.arch};
      for (const std::string& target : targets) code = std::max(code, check_target(spec, target));
    } catch (const Error& error) {
      code = std::max(code, report_error(error));
    }
  }
  return code;
}

}  // namespace

Command add_check_command(CLI::App& parent) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* app = parent.add_subcommand(
      "check",
      "Validate specs, print them resolved (every field, defaults filled in), then one line "
      "a target: the forward kernel it gets, or `no kernel` and the error at the field to "
      "blame. Targets: --arch, else every one the spec's arch allows (sm90a: sm_90a; auto, "
      "sm80: sm_80, sm_86, sm_89, sm_90a). Exit 0 when every target gets a kernel, 2 when "
      "the spec is invalid or a target gets none");
  app->add_option("specs", options->spec_files, "spec files (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  add_arch_option(*app, options->arch,
                  "check this target only: sm_80, sm_86, sm_89 or sm_90a (default: every "
                  "target the spec's arch allows)");
  return {app, [options] { return run_check(*options); }};
}

}  // namespace flashjit::cli
