// Which compile target `gen` and `compile` use: --arch if given, else the spec's arch
// (sm80 -> sm_80, sm90a -> sm_90a), else for `arch: auto` this machine's GPU, else sm_80.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "flashjit/flashjit.h"

namespace flashjit::cli {

// Adds --arch to a subcommand, validated against the targets flashjit knows.
void add_arch_option(CLI::App& app, std::string& arch);

// Resolves the target; says on stderr where it came from unless --arch picked it.
std::string resolve_target(const Spec& spec, const std::string& arch_option);

}  // namespace flashjit::cli
