#include "generator/targets.h"

#include <fmt/format.h>

#include <algorithm>

#include "flashjit/flashjit.h"

namespace flashjit::gen {
namespace {

struct TargetInfo {
  const char* name;
  int max_shared;     // opt-in dynamic shared memory per CTA, bytes
  int shared_per_sm;  // shared memory an SM holds, bytes
  int threads_per_sm;
  bool dependent_launch;  // griddepcontrol (programmatic dependent launch), sm_90 on
};
// Per CTA, sm_80 (A100): 163 KB of 164 an SM; sm_86/sm_89 (consumer Ampere, Ada): 99 KB of 100;
// sm_90a (H100/H200): 227 KB of 228.
constexpr TargetInfo kTargets[] = {{"sm_80", 166912, 167936, 2048, false},
                                   {"sm_86", 101376, 102400, 1536, false},
                                   {"sm_89", 101376, 102400, 1536, false},
                                   {"sm_90a", 232448, 233472, 2048, true}};
// Shared memory the system reserves for each resident CTA (8.x and 9.0).
constexpr int kSharedReservedPerCta = 1024;

const TargetInfo* find_target(const std::string& target) {
  for (const auto& t : kTargets)
    if (target == t.name) return &t;
  return nullptr;
}

}  // namespace

bool is_known_target(const std::string& target) { return find_target(target) != nullptr; }

std::vector<std::string> known_targets() {
  std::vector<std::string> names;
  for (const auto& t : kTargets) names.push_back(t.name);
  return names;
}

void require_known_target(const std::string& target) {
  if (!is_known_target(target))
    throw Error(ErrorKind::Usage,
                fmt::format("unknown target '{}'; flashjit targets sm_80, sm_86, sm_89, sm_90a", target));
}

bool has_dependent_launch(const std::string& target) {
  require_known_target(target);
  return find_target(target)->dependent_launch;
}

std::string target_for_device(int cc_major, int cc_minor) {
  if (cc_major == 9 && cc_minor == 0) return "sm_90a";
  if (cc_major == 8 && cc_minor == 6) return "sm_86";
  if (cc_major == 8 && cc_minor == 9) return "sm_89";
  // An sm_80 cubin runs on every later 8.x GPU.
  if (cc_major == 8) return "sm_80";
  throw Error(ErrorKind::Usage,
              fmt::format("GPUs of compute capability {}.{} are not supported yet; flashjit "
                          "builds for 8.x (sm_80, sm_86, sm_89) and 9.0 (sm_90a)",
                          cc_major, cc_minor));
}

int max_shared_bytes(const std::string& target) {
  require_known_target(target);
  return find_target(target)->max_shared;
}

int resident_ctas(const std::string& target, int shared_bytes, int threads) {
  require_known_target(target);
  const TargetInfo& t = *find_target(target);
  const int by_shared = t.shared_per_sm / (shared_bytes + kSharedReservedPerCta);
  const int by_threads = t.threads_per_sm / threads;
  return std::max(1, std::min(by_shared, by_threads));
}

}  // namespace flashjit::gen
