// The one JSON view of a CompileReport, shared by `flashjit compile --json` and the C ABI's
// flashjit_kernel_report_json (scripts and bench/flashjit_lib.py read its field names).
#pragma once

#include <nlohmann/json.hpp>

#include "flashjit/flashjit.h"

namespace flashjit::rt {

// {kernel_name, target, tiles: {block_m, block_n, warps, stages}, registers, shared_bytes,
//  spill_store_bytes, spill_load_bytes, stack_bytes, compile_ms, cache_hit, cache_file}
nlohmann::json compile_report_json(const CompileReport& report);

}  // namespace flashjit::rt
