// The process's flashjit::Runtime of each GPU, made on first use. A Runtime owns the in-memory
// kernel cache, so every Python kernel of one GPU shares one: a kernel compiled by
// Kernel.compile() or flashjit.compile_only() is not compiled again by the first call.
#pragma once

#include "flashjit/flashjit.h"

namespace flashjit::py {

// The Runtime of CUDA device `ordinal` (thread-safe; lives until the process exits).
Runtime& runtime_for(int ordinal);

}  // namespace flashjit::py
