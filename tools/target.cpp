#include "tools/target.h"

#include <fmt/format.h>

#include "generator/plan.h"
#include "generator/spec_targets.h"
#include "runtime/driver.h"

namespace flashjit::cli {

void add_arch_option(CLI::App& app, std::string& arch, const std::string& help) {
  app.add_option("--arch", arch, help)
      ->check([](const std::string& value) {
        return gen::is_known_target(value)
                   ? std::string()
                   : fmt::format("unknown target '{}': use sm_80, sm_86, sm_89 or sm_90a", value);
      });
}

std::string resolve_target(const Spec& spec, const std::string& arch_option) {
  if (!arch_option.empty()) return arch_option;
  switch (spec.arch) {
    case Arch::Sm80:
      fmt::print(stderr, "// flashjit: target sm_80 (spec {}: arch sm80)\n", spec.name);
      return "sm_80";
    case Arch::Sm90a:
      fmt::print(stderr, "// flashjit: target sm_90a (spec {}: arch sm90a)\n", spec.name);
      return "sm_90a";
    case Arch::Auto: break;
  }
  if (rt::Driver::available()) {
    const DeviceInfo info = rt::Driver::get().device_info();
    const std::string target = gen::target_for_device(info.cc_major, info.cc_minor);
    fmt::print(stderr, "// flashjit: target {} (spec {}: arch auto, GPU {})\n", target,
               spec.name, info.name);
    return target;
  }
  fmt::print(stderr, "// flashjit: target sm_80 (spec {}: arch auto, no GPU: {})\n", spec.name,
             rt::Driver::unavailable_reason());
  return "sm_80";
}

void require_forward_kernel(const gen::LocatedSpec& spec, const std::string& target) {
  if (auto problem = gen::target_problem(spec.spec, target))
    throw gen::located_error(spec, *problem);
}

}  // namespace flashjit::cli
