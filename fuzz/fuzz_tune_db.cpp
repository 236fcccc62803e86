// libFuzzer target: tune::parse, the reader of the tune DB (lookups, `tune --show`, and the
// writers' re-read under their lock). A text is a DB, with its bad entries skipped, or an
// Error; the good entries of every kind must serialize and read back as many.
#include <cstddef>
#include <cstdint>
#include <string>

#include "flashjit/flashjit.h"
#include "runtime/tune_db.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  flashjit::tune::ParsedDb parsed;
  try {
    parsed = flashjit::tune::parse(text, "fuzz.json");
  } catch (const flashjit::Error&) {
    return 0;
  }
  const flashjit::tune::ParsedDb again =
      flashjit::tune::parse(flashjit::tune::serialize(parsed.entries), "serialized.json");
  if (again.entries.tiles.size() != parsed.entries.tiles.size() ||
      again.entries.decode.size() != parsed.entries.decode.size() ||
      again.entries.backward.size() != parsed.entries.backward.size() || !again.skipped.empty())
    __builtin_trap();
  return 0;
}
