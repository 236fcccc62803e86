// Which compile target `gen` and `compile` use: --arch if given, else the spec's arch
// (sm80 -> sm_80, sm90a -> sm_90a), else for `arch: auto` this machine's GPU, else sm_80.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "flashjit/flashjit.h"
#include "generator/spec_source.h"

namespace flashjit::cli {

// Adds --arch to a subcommand, validated against the targets flashjit knows; `help` says what
// it does there (default: the compile target of gen and compile).
void add_arch_option(CLI::App& app, std::string& arch,
                     const std::string& help = "compile target: sm_80, sm_86, sm_89 or sm_90a "
                                               "(default: from the spec's arch; for arch: auto, "
                                               "this machine's GPU, else sm_80)");

// Resolves the target; says on stderr where it came from unless --arch picked it.
std::string resolve_target(const Spec& spec, const std::string& arch_option);

// Throws Error(Spec) at the field to blame (tiles:, arch:) when the spec gets no forward
// kernel on `target` (generator/spec_targets.h), before planning would refuse it unlocated.
void require_forward_kernel(const gen::LocatedSpec& spec, const std::string& target);

}  // namespace flashjit::cli
