#include "generator/wgmma_emit.h"

#include <fmt/format.h>

namespace flashjit::gen {

namespace {

// "{%0, %1, ..., %(count-1)}" starting at `first`.
std::string register_list(int first, int count) {
  std::string out = "{";
  for (int i = 0; i < count; ++i) out += fmt::format("{}%{}", i ? ", " : "", first + i);
  return out + "}";
}

// The accumulator operands "+f"(d[j][e]) of an n-wide tile of n8 fragments.
std::string accumulator_operands(int n) {
  std::string out;
  for (int j = 0; j < n / 8; ++j)
    for (int e = 0; e < 4; ++e) out += fmt::format("{}\"+f\"(d[{}][{}])", out.empty() ? "" : ", ", j, e);
  return out;
}

// The SS member `name`: A and B from shared memory, each K-major (trans 0) or MN-major
// (trans 1). The scale-d predicate: false overwrites D (a product's first k step), true
// accumulates.
std::string ss_member(const char* name, int trans_a, int trans_b, int n,
                      const std::string& shape) {
  const int acc = n / 2;
  return fmt::format(
      "  static __device__ __forceinline__ void {name}(float (&d)[{tiles}][4], u64 a, u64 b, bool accumulate) {{\n"
      "    asm volatile(\"{{\\n.reg .pred acc;\\nsetp.ne.b32 acc, %{flag}, 0;\\n\"\n"
      "                 \"wgmma.mma_async.sync.aligned.{shape} {d_regs}, %{a}, %{b}, acc, 1, 1, {trans_a}, {trans_b};\\n}}\\n\"\n"
      "                 : {operands}\n"
      "                 : \"l\"(a), \"l\"(b), \"r\"(static_cast<int>(accumulate)));\n"
      "  }}\n",
      fmt::arg("name", name), fmt::arg("tiles", n / 8), fmt::arg("shape", shape),
      fmt::arg("d_regs", register_list(0, acc)), fmt::arg("a", acc), fmt::arg("b", acc + 1),
      fmt::arg("flag", acc + 2), fmt::arg("operands", accumulator_operands(n)),
      fmt::arg("trans_a", trans_a), fmt::arg("trans_b", trans_b));
}

}  // namespace

std::string emit_wgmma(DType dtype, int n) {
  if (n < 8 || n > 256 || n % 8 != 0)
    throw Error(ErrorKind::Usage, fmt::format("wgmma N {} is not a multiple of 8 in 8..256", n));
  const char* type = dtype == DType::BF16 ? "bf16" : "f16";
  const int acc = n / 2;  // fp32 accumulators a thread
  const std::string shape = fmt::format("m64n{}k16.f32.{}.{}", n, type, type);
  return fmt::format(
      "template <>\n"
      "struct Wgmma<{n}> {{\n"
      "{ss}{ss_mn}{ss_a_mn}"
      "  static __device__ __forceinline__ void rs(float (&d)[{tiles}][4], const u32 (&a)[4], u64 b, bool accumulate) {{\n"
      "    asm volatile(\"{{\\n.reg .pred acc;\\nsetp.ne.b32 acc, %{rs_flag}, 0;\\n\"\n"
      "                 \"wgmma.mma_async.sync.aligned.{shape} {d_regs}, {a_regs}, %{rs_b}, acc, 1, 1, 1;\\n}}\\n\"\n"
      "                 : {operands}\n"
      "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), \"r\"(static_cast<int>(accumulate)));\n"
      "  }}\n"
      "}};\n",
      fmt::arg("n", n), fmt::arg("tiles", n / 8), fmt::arg("shape", shape),
      fmt::arg("ss", ss_member("ss", 0, 0, n, shape)),
      fmt::arg("ss_mn", ss_member("ss_mn", 1, 1, n, shape)),
      fmt::arg("ss_a_mn", ss_member("ss_a_mn", 1, 0, n, shape)),
      fmt::arg("d_regs", register_list(0, acc)), fmt::arg("operands", accumulator_operands(n)),
      fmt::arg("a_regs", register_list(acc, 4)), fmt::arg("rs_b", acc + 4),
      fmt::arg("rs_flag", acc + 5));
}

}  // namespace flashjit::gen
