// libFuzzer target: verify::read_npy, the reader of `flashjit run`'s input tensors. The bytes
// are handed over as a file (an anonymous memfd: read_npy takes a path and fstat()s it), so
// the size checks against the file are the ones a real input meets.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashjit/flashjit.h"
#include "verify/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = ::memfd_create("fuzz.npy", MFD_CLOEXEC);
  if (fd < 0) __builtin_trap();
  for (size_t written = 0; written < size;) {
    const ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) __builtin_trap();
    written += static_cast<size_t>(n);
  }
  try {
    const flashjit::verify::NpyArray array =
        flashjit::verify::read_npy("/proc/self/fd/" + std::to_string(fd));
    if (static_cast<int64_t>(array.values.size()) != array.elements()) __builtin_trap();
  } catch (const flashjit::Error&) {
  }
  ::close(fd);
  return 0;
}
