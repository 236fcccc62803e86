// The compile targets flashjit builds for and what each allows a kernel.
#pragma once

#include <string>
#include <vector>

namespace flashjit::gen {

// Compile targets flashjit knows ("sm_80", "sm_86", "sm_89", "sm_90a").
bool is_known_target(const std::string& target);
// Every target flashjit knows, in the table's order.
std::vector<std::string> known_targets();
// Throws Error(Usage) naming the known targets when `target` is not one.
void require_known_target(const std::string& target);
// Whether kernels built for `target` wait for the previous launch on the device
// (fj::wait_for_previous_launch), so that the runtime may launch them programmatically
// dependent on it (sm_90a).
bool has_dependent_launch(const std::string& target);
// The target for a device of compute capability major.minor (9.0 -> "sm_90a").
std::string target_for_device(int cc_major, int cc_minor);
// Max dynamic shared memory per CTA on a target (opt-in limit).
int max_shared_bytes(const std::string& target);
// The CTAs of `threads` threads and `shared_bytes` of dynamic shared memory that one SM of
// the target holds at once (at least 1), as shared memory and threads allow.
int resident_ctas(const std::string& target, int shared_bytes, int threads);

}  // namespace flashjit::gen
