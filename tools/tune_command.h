// `flashjit tune`: the autotuner's command (autotune/), declared apart from command.h so the
// tuner's owner can change it without touching the other commands.
#pragma once

#include "tools/command.h"

namespace flashjit::cli {

Command add_tune_command(CLI::App& parent);

}  // namespace flashjit::cli
