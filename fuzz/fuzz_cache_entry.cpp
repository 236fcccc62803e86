// libFuzzer target: what the disk cache does with an entry's bytes (runtime/disk_cache.cpp,
// runtime/kernel_compiler.cpp): decode the artifact, then parse its ptxas log. Both may only
// throw Error (the log parser's make the entry a miss there). The raw input is also parsed as
// a log: mutations rarely grow the log field of a whole entry far enough to reach its parser's
// limits.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "flashjit/flashjit.h"
#include "fuzz/frame_fixup.h"
#include "runtime/artifact.h"
#include "runtime/ptxas_report.h"

namespace {

void read_log(const std::string& log, const std::string& entry) {
  try {
    flashjit::rt::parse_ptxas_report(log, entry);
  } catch (const flashjit::Error&) {
  }
}

void read_entry(std::string_view bytes) {
  flashjit::rt::Artifact artifact;
  try {
    artifact = flashjit::rt::decode_artifact(bytes);
  } catch (const flashjit::Error&) {
    return;
  }
  if (flashjit::rt::decode_artifact(flashjit::rt::encode_artifact(artifact)) != artifact)
    __builtin_trap();
  read_log(artifact.ptxas_log, artifact.kernel_name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  read_entry(bytes);
  read_entry(flashjit::fuzz::with_fixed_frame(bytes));
  read_log(std::string(bytes), "");
  return 0;
}
