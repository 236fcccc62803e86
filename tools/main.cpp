// flashjit: check, generate, compile and run attention kernels described by YAML specs.
#include <exception>
#include <iostream>
#include <vector>

#include <fmt/format.h>

#include "tools/command.h"
#include "tools/tune_command.h"

namespace flashjit::cli {

int exit_code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Spec:
    case ErrorKind::Shape:
    case ErrorKind::Usage: return kBadInput;
    case ErrorKind::NoDevice: return kNoGpu;
    case ErrorKind::Compile: return kCompileError;
    case ErrorKind::Driver:
    case ErrorKind::Cache:
    case ErrorKind::Io: return kOtherError;
  }
  return kOtherError;
}

int report_error(const Error& error) {
  fmt::print(stderr, "flashjit: error: {}\n", error.what());
  return exit_code_for(error.kind());
}

}  // namespace flashjit::cli

int main(int argc, char** argv) {
  using namespace flashjit::cli;
  CLI::App app{"flashjit: FlashAttention kernels generated from YAML specs, compiled at run "
               "time with NVRTC"};
  app.require_subcommand(1);
  app.set_version_flag("--version", flashjit::version());
  const std::vector<Command> commands = {add_check_command(app), add_gen_command(app),
                                         add_compile_command(app), add_run_command(app),
                                         add_cache_command(app), add_build_command(app),
                                         add_tune_command(app), add_bench_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help and --version are "errors" with exit code 0; real usage errors map to 2.
    const int code = app.exit(error);
    return code == 0 ? kOk : kBadInput;
  }
  try {
    for (const Command& command : commands)
      if (command.app->parsed()) return command.run();
  } catch (const flashjit::Error& error) {
    return report_error(error);
  } catch (const std::exception& error) {
    fmt::print(stderr, "flashjit: error: {}\n", error.what());
    return kOtherError;
  }
  return kBadInput;
}
