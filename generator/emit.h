// Renders a Plan into one self-contained CUDA source string for NVRTC: a short prelude of
// constexprs and aliases, the embedded templates it includes, and one extern "C" entry.
#pragma once

#include <string>

#include "generator/plan.h"

namespace flashjit::gen {

std::string emit_source(const Plan& plan);

}  // namespace flashjit::gen
