// libFuzzer target: Spec::from_yaml, the reader of every spec file, C ABI string and bundled
// spec. Any text is either a spec or an Error(Spec); anything else escaping is a finding. A spec
// that is read must print (to_yaml) as YAML that reads back to the same spec.
#include <cstddef>
#include <cstdint>
#include <string>

#include "flashjit/flashjit.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  flashjit::Spec spec;
  try {
    spec = flashjit::Spec::from_yaml(text, "fuzz.yaml");
  } catch (const flashjit::Error&) {
    return 0;
  }
  const std::string printed = spec.to_yaml();
  if (flashjit::Spec::from_yaml(printed, "printed.yaml").to_yaml() != printed) __builtin_trap();
  return 0;
}
