#include "generator/bwd_sm90_source.h"

#include <fmt/format.h>

#include <set>

#include "generator/wgmma_emit.h"

namespace flashjit::gen {

std::string bwd_sm90_wgmma_source(const Plan& plan, const std::vector<int>& shapes) {
  std::set<int> ns;
  // Products wider than wgmma's N of 256 run as 256-column chunks and the rest
  // (templates/tile/wgmma_tiles.cuh).
  for (int n : shapes) {
    for (; n > 256; n -= 256) ns.insert(256);
    ns.insert(n);
  }
  std::string out = "\n// ---- the wgmma shapes this kernel uses\nnamespace fj {\n";
  for (int n : ns) out += emit_wgmma(plan.spec.dtype, n);
  return out + "}  // namespace fj\n";
}

std::string bwd_sm90_entry(const Plan& plan, const char* function) {
  return fmt::format(
      "// 384 threads, and setmaxnreg needs the bound to hold.\n"
      "extern \"C\" __global__ void __launch_bounds__({}, 1) {}(\n"
      "    const BwdParams params, const __grid_constant__ fj::TmaDesc tm_q,\n"
      "    const __grid_constant__ fj::TmaDesc tm_k, const __grid_constant__ fj::TmaDesc tm_v,\n"
      "    const __grid_constant__ fj::TmaDesc tm_do) {{\n"
      "  {}<KernelConfig>(params, &tm_q, &tm_k, &tm_v, &tm_do);\n"
      "}}\n",
      plan.threads, plan.kernel_name, function);
}

}  // namespace flashjit::gen
