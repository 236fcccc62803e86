// `flashjit gen SPEC.yaml [--arch T] [-o FILE]`: the CUDA source flashjit compiles.
#include <fstream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "generator/emit.h"
#include "generator/plan.h"
#include "tools/command.h"
#include "tools/target.h"

namespace flashjit::cli {

namespace {

struct GenOptions {
  std::string spec_file;
  std::string arch;
  std::string output;
};

int run_gen(const GenOptions& options) {
  const gen::LocatedSpec spec = gen::read_located_spec_file(options.spec_file);
  const std::string target = resolve_target(spec.spec, options.arch);
  require_forward_kernel(spec, target);
  const gen::Plan plan = gen::make_plan(spec.spec, target);
  const std::string source = gen::emit_source(plan);
  if (options.output.empty()) {
    fmt::print("{}", source);
    return kOk;
  }
  std::ofstream out(options.output, std::ios::binary | std::ios::trunc);
  out << source;
  if (!out.flush())
    throw Error(ErrorKind::Io, fmt::format("{}: cannot write the generated source", options.output));
  return kOk;
}

}  // namespace

Command add_gen_command(CLI::App& parent) {
  auto options = std::make_shared<GenOptions>();
  CLI::App* app = parent.add_subcommand(
      "gen", "Print the generated CUDA source of a spec (what NVRTC compiles)");
  app->add_option("spec", options->spec_file, "spec file (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  add_arch_option(*app, options->arch);
  app->add_option("-o,--output", options->output, "write the source to FILE instead of stdout");
  return {app, [options] { return run_gen(*options); }};
}

}  // namespace flashjit::cli
