// The subcommands of the `flashjit` program: each file adds one to the CLI11 app and returns
// the action main() runs when it was chosen. Exit codes are shared by all of them.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "flashjit/flashjit.h"

namespace flashjit::cli {

enum ExitCode : int {
  kOk = 0,
  kCheckFailed = 1,  // a numerical check failed, or a kernel spills registers
  kBadInput = 2,     // bad spec, bad usage, inputs that do not fit
  kNoGpu = 3,
  kCompileError = 4,
  kOtherError = 5,   // driver, cache, file errors
};

// The exit code for an error of this kind.
int exit_code_for(ErrorKind kind);
// Prints "flashjit: error: <message>" on stderr and returns exit_code_for(error.kind()).
int report_error(const Error& error);

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_check_command(CLI::App& parent);
Command add_gen_command(CLI::App& parent);
Command add_compile_command(CLI::App& parent);
Command add_run_command(CLI::App& parent);
Command add_cache_command(CLI::App& parent);
Command add_build_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);

}  // namespace flashjit::cli
