// Parses the ptxas -v report that NVRTC leaves in its program log (registers, spills, stack,
// static shared memory) and collects ptxas warnings, the performance ones in particular.
#pragma once

#include <string>
#include <vector>

namespace flashjit::rt {

struct PtxasReport {
  std::string entry;          // the entry function the numbers below belong to
  int registers = 0;          // "Used N registers" of the entry
  int static_shared_bytes = 0;  // "N bytes smem" of the entry (dynamic smem is not in it)
  // Summed / maximised over every function in the module, not only the entry: a spill in a
  // non-inlined callee costs the kernel just the same.
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_bytes = 0;        // largest "bytes stack frame"
  std::vector<std::string> warnings;  // every warning line of the log, as written

  // True when a warning names one of the ptxas performance codes that mean the kernel
  // runs slower than written: C7508 (setmaxnreg ignored), C7511/C7517/C7519 (wgmma
  // serialized or waits inserted).
  bool has_performance_warning() const;
};

// `entry` picks the entry function when the log describes several ("" = the first one).
// A log without a ptxas report (e.g. an empty one) gives an all-zero report. Throws Error(Io)
// for a number, or a sum of spill bytes, past int (a damaged or forged log).
PtxasReport parse_ptxas_report(const std::string& log, const std::string& entry = "");

}  // namespace flashjit::rt
