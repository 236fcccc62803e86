// libFuzzer target: registering a bundle (BundleRegistry::add, which reads and checks it) and
// printing its manifest (`flashjit build --json`, `flashjit inspect`). Only Error may escape
// either; the registry is a local one, so inputs do not pile up in the process.
#include <cstddef>
#include <cstdint>
#include <string>

#include "flashjit/flashjit.h"
#include "fuzz/frame_fixup.h"
#include "runtime/bundle.h"

namespace {

void read_bundle_bytes(const std::string& bytes) {
  try {
    flashjit::rt::BundleRegistry registry;
    registry.add(bytes, "fuzz.fjb");
  } catch (const flashjit::Error&) {
  }
  try {
    flashjit::rt::bundle_manifest(flashjit::rt::read_bundle(bytes, "fuzz.fjb")).dump(2);
  } catch (const flashjit::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  read_bundle_bytes(bytes);
  read_bundle_bytes(flashjit::fuzz::with_fixed_frame(bytes));
  return 0;
}
