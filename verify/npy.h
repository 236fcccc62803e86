// NumPy .npy files (format versions 1.0, 2.0 and 3.0): read little-endian C-order arrays of
// float16 ('<f2'), float32 ('<f4') and float64 ('<f8') into floats; write float32 or
// float16. Debian packages no C++ npy library, so this is a small reader/writer of the
// documented format (numpy.lib.format). NumPy has no bf16: save bf16 tensors as float32
// and flashjit rounds them (round to nearest even) to the spec's dtype.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace flashjit::verify {

struct NpyArray {
  std::string descr;            // as found in the file: "<f2", "<f4", "<f8"
  std::vector<int64_t> shape;   // C order
  std::vector<float> values;    // every element; float64 data is rounded to float

  int64_t elements() const;
};

// Throws Error(Io) naming the file and what is wrong with it. Every length and shape the file
// claims is checked against its size (with overflow checks) before anything is allocated, and
// the file must hold exactly the header and the data: a regular file, no bytes after the data.
NpyArray read_npy(const std::string& path);

void write_npy_f32(const std::string& path, std::span<const int64_t> shape,
                   std::span<const float> values);
void write_npy_f16(const std::string& path, std::span<const int64_t> shape,
                   std::span<const uint16_t> bits);

// "(2, 3, 4)" — for messages.
std::string shape_string(std::span<const int64_t> shape);

}  // namespace flashjit::verify
