// NVRTC: one generated source -> a CUBIN for one exact target, its PTX and the ptxas report.
// Thread-safe (NVRTC programs are independent); the autotuner compiles from several threads.
// NVRTC is opened with dlopen on first use (FLASHJIT_NVRTC_LIBRARY, else libnvrtc.so.13, else
// libnvrtc.so), never linked: kernels served from bundles need no libnvrtc. Where the process
// already holds one of the default names (torch's wheel loads it), flashjit opens a copy of
// that file from its cache folder instead (runtime/own_library.h): NVRTC keeps state from one
// program to the next, and other libraries' compiles must not change flashjit's kernels.
// FLASHJIT_VERBOSE says which file was opened. Every function below that needs NVRTC throws
// Error(Compile) naming the libraries tried when it is missing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flashjit::rt {

struct NvrtcOutput {
  std::string cubin;
  std::string ptx;
  std::string log;  // the program log: ptxas -v report and warnings
  double compile_ms = 0;
};

// "13.0": part of every cache key.
std::string nvrtc_version();

// The options every kernel is compiled with for `target` ("sm_80", "sm_90a", ...). No include
// path: the generated source is self-contained. No --use_fast_math: the kernel picks its
// approximate instructions (ex2.approx) explicitly where the precision allows.
std::vector<std::string> nvrtc_options(const std::string& target);

// Compiles `source` (an extern "C" kernel) for `target`; `program_name` names the source in
// the log ("<kernel_name>.cu"). Throws Error(Compile) with the NVRTC log and the generated
// source lines the log points at.
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program_name,
                          const std::string& target);

// How many times nvrtc_compile ran NVRTC in this process: tests assert cache hits with it.
uint64_t nvrtc_invocations();

// Never throws: true when NVRTC could be (or was) loaded; loads it on the first call.
bool nvrtc_available();
// Why nvrtc_available() is false ("" when it is true).
std::string nvrtc_unavailable_reason();

}  // namespace flashjit::rt
