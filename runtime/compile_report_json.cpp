#include "runtime/compile_report_json.h"

namespace flashjit::rt {

nlohmann::json compile_report_json(const CompileReport& r) {
  return {{"kernel_name", r.kernel_name},
          {"target", r.target},
          {"tiles",
           {{"block_m", r.tiles.block_m},
            {"block_n", r.tiles.block_n},
            {"warps", r.tiles.warps},
            {"stages", r.tiles.stages}}},
          {"registers", r.registers},
          {"shared_bytes", r.shared_bytes},
          {"spill_store_bytes", r.spill_store_bytes},
          {"spill_load_bytes", r.spill_load_bytes},
          {"stack_bytes", r.stack_bytes},
          {"compile_ms", r.compile_ms},
          {"cache_hit", r.cache_hit},
          {"cache_file", r.cache_file}};
}

}  // namespace flashjit::rt
