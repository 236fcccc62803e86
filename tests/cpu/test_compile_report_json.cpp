// The one JSON view of a compile report (the CLI's `compile --json` and the C ABI's
// flashjit_kernel_report_json): its field names and values.
#include <doctest/doctest.h>

#include "runtime/compile_report_json.h"

TEST_CASE("compile report JSON: every field under its one name, tiles nested") {
  flashjit::CompileReport r;
  r.kernel_name = "fa_fwd_qk64_v64_fp16_full_m64n64w4s2_a16_sm80";
  r.target = "sm_80";
  r.tiles = {64, 32, 4, 2};
  r.registers = 96;
  r.shared_bytes = 24576;
  r.spill_store_bytes = 1;
  r.spill_load_bytes = 2;
  r.stack_bytes = 3;
  r.compile_ms = 412.5;
  r.cache_hit = true;
  r.cache_file = "/cache/x.fjk";
  const nlohmann::json expected = {
      {"kernel_name", r.kernel_name},
      {"target", "sm_80"},
      {"tiles", {{"block_m", 64}, {"block_n", 32}, {"warps", 4}, {"stages", 2}}},
      {"registers", 96},
      {"shared_bytes", 24576},
      {"spill_store_bytes", 1},
      {"spill_load_bytes", 2},
      {"stack_bytes", 3},
      {"compile_ms", 412.5},
      {"cache_hit", true},
      {"cache_file", "/cache/x.fjk"}};
  CHECK(flashjit::rt::compile_report_json(r) == expected);
}
