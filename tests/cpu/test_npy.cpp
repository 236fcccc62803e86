// NumPy .npy reading/writing and the fp16/bf16 conversions the user's files go through.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "flashjit/flashjit.h"
#include "verify/half.h"
#include "verify/npy.h"

namespace flashjit::verify {

namespace {

std::filesystem::path temp_dir() {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("flashjit_test_npy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// A .npy file written by hand: magic, version, header length, header, data.
void write_raw(const std::filesystem::path& path, int major, const std::string& dict,
               const std::string& data) {
  std::string header = dict;
  const size_t len_bytes = major == 1 ? 2 : 4;
  while ((6 + 2 + len_bytes + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY", 6);
  out.put(static_cast<char>(major));
  out.put(0);
  const uint32_t len = static_cast<uint32_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), static_cast<std::streamsize>(len_bytes));
  out << header << data;
}

template <class T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

void check_io_error(const std::filesystem::path& path, const std::string& fragment) {
  try {
    read_npy(path.string());
    FAIL("read_npy accepted ", path.string());
  } catch (const Error& error) {
    CHECK(error.kind() == ErrorKind::Io);
    const std::string message = error.what();
    CHECK_MESSAGE(message.find(path.string()) != std::string::npos, message);
    CHECK_MESSAGE(message.find(fragment) != std::string::npos, message);
  }
}

}  // namespace

TEST_CASE("npy: float32 and float16 round trips keep shape and values") {
  const auto dir = temp_dir();
  const std::vector<int64_t> shape = {2, 3, 1, 4};
  std::vector<float> values(24);
  for (size_t n = 0; n < values.size(); ++n) values[n] = 0.25f * n - 3.f;

  write_npy_f32((dir / "a.npy").string(), shape, values);
  const NpyArray a = read_npy((dir / "a.npy").string());
  CHECK(a.descr == "<f4");
  CHECK(a.shape == shape);
  CHECK(a.values == values);
  CHECK(std::filesystem::file_size(dir / "a.npy") == 128 + 24 * 4);  // 64-byte aligned data

  std::vector<uint16_t> halves;
  for (float v : values) halves.push_back(float_to_half(v));
  write_npy_f16((dir / "h.npy").string(), shape, halves);
  const NpyArray h = read_npy((dir / "h.npy").string());
  CHECK(h.descr == "<f2");
  CHECK(h.shape == shape);
  CHECK(h.values == values);  // these values are exact in fp16

  const std::vector<int64_t> vector_shape = {5};
  write_npy_f32((dir / "v.npy").string(), vector_shape, std::vector<float>(5, 1.f));
  CHECK(read_npy((dir / "v.npy").string()).shape == vector_shape);
  std::filesystem::remove_all(dir);
}

TEST_CASE("npy: reads float64 and version 2.0 headers") {
  const auto dir = temp_dir();
  write_raw(dir / "d.npy", 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
            bytes_of(std::vector<double>{1.5, -2.0, 1e-3}));
  const NpyArray d = read_npy((dir / "d.npy").string());
  CHECK(d.shape == std::vector<int64_t>{3});
  CHECK(d.values == std::vector<float>{1.5f, -2.f, 1e-3f});
  std::filesystem::remove_all(dir);
}

TEST_CASE("npy: unreadable files are errors naming the file and the problem") {
  const auto dir = temp_dir();
  const std::string two_floats = bytes_of(std::vector<float>{1, 2});
  write_raw(dir / "fortran.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
            two_floats);
  check_io_error(dir / "fortran.npy", "Fortran");
  write_raw(dir / "int.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
            two_floats);
  check_io_error(dir / "int.npy", "'<i4'");
  write_raw(dir / "big_endian.npy", 1,
            "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", two_floats);
  check_io_error(dir / "big_endian.npy", "'>f4'");
  write_raw(dir / "short.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
            two_floats);
  check_io_error(dir / "short.npy", "data ends early");
  write_raw(dir / "no_shape.npy", 1, "{'descr': '<f4', 'fortran_order': False, }", two_floats);
  check_io_error(dir / "no_shape.npy", "'shape'");
  std::ofstream(dir / "text.npy") << "not numpy";
  check_io_error(dir / "text.npy", "magic");
  check_io_error(dir / "missing.npy", "cannot open");
  std::filesystem::remove_all(dir);
}

// A file holding exactly `bytes`.
void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST_CASE("npy: lengths and shapes a header claims are checked against the file first") {
  const auto dir = temp_dir();
  // 12 bytes: version 2.0 with a header length of 4 GiB - 1 and no header.
  write_bytes(dir / "huge_header.npy", std::string("\x93NUMPY\x02\x00\xff\xff\xff\xff", 12));
  check_io_error(dir / "huge_header.npy", "header length 4294967295 is over the limit");
  // A header length within the limit that the file does not hold.
  write_bytes(dir / "short_header.npy", std::string("\x93NUMPY\x01\x00\x00\x80{", 11));
  check_io_error(dir / "short_header.npy", "header length 32768 runs past the end of the file");
  // A header only, claiming 6 GB of float32 data.
  write_raw(dir / "huge_shape.npy", 1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1500000000,), }", "");
  check_io_error(dir / "huge_shape.npy", "needs 6000000000 bytes, the file holds 0");
  // Element counts and byte counts past 2^64.
  write_raw(dir / "overflow.npy", 1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2), }",
            "");
  check_io_error(dir / "overflow.npy", "more bytes than 2^64");
  write_raw(dir / "overflow_bytes.npy", 1,
            "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,), }", "");
  check_io_error(dir / "overflow_bytes.npy", "more bytes than 2^64");
  write_raw(dir / "huge_dim.npy", 1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "");
  check_io_error(dir / "huge_dim.npy", "dimension too large");
  // A zero dimension is an empty array, not an error.
  write_raw(dir / "empty.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 7), }",
            "");
  CHECK(read_npy((dir / "empty.npy").string()).values.empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("npy: a file is read exactly as numpy writes it, or refused") {
  const auto dir = temp_dir();
  const std::string two_floats = bytes_of(std::vector<float>{1, 2});
  write_raw(dir / "trailing.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
            two_floats);
  check_io_error(dir / "trailing.npy", "4 bytes after the data");
  write_raw(dir / "twice.npy", 1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (1,), }",
            two_floats);
  check_io_error(dir / "twice.npy", "'shape' given twice");
  write_raw(dir / "after.npy", 1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk", two_floats);
  check_io_error(dir / "after.npy", "text after the closing '}'");
  write_raw(dir / "order.npy", 1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }",
            two_floats);
  check_io_error(dir / "order.npy", "expected True or False");
  write_raw(dir / "version.npy", 4, "{}", "");
  check_io_error(dir / "version.npy", "version 4.0 is not supported");
  std::filesystem::create_directory(dir / "folder.npy");
  check_io_error(dir / "folder.npy", "is a folder");
  REQUIRE(::mkfifo((dir / "fifo.npy").c_str(), 0600) == 0);
  check_io_error(dir / "fifo.npy", "is not a regular file");  // refused without blocking
  std::filesystem::remove_all(dir);
}

TEST_CASE("npy: header text in an error is escaped and cut") {
  const auto dir = temp_dir();
  write_raw(dir / "binary.npy", 1,
            "{'descr': '\x01\x7f" + std::string(1000, 'x') + "', 'fortran_order': False, "
            "'shape': (2,), }", "");
  try {
    read_npy((dir / "binary.npy").string());
    FAIL("read_npy accepted a binary dtype");
  } catch (const Error& error) {
    const std::string message = error.what();
    CHECK_MESSAGE(message.find("'\\x01\\x7f") != std::string::npos, message);
    CHECK_MESSAGE(message.find("(cut: 1002 bytes in all)") != std::string::npos, message);
    CHECK(message.size() < 400);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("half: every fp16 value survives half -> float -> half") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = half_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      CHECK(std::isnan(half_to_float(float_to_half(value))));
      continue;
    }
    REQUIRE(float_to_half(value) == bits);
  }
}

TEST_CASE("half: float -> fp16 rounds to nearest even, overflows to inf, keeps subnormals") {
  CHECK(float_to_half(1.f + 0x1p-11f) == 0x3c00);         // tie between 1 and 1+2^-10: even
  CHECK(float_to_half(1.f + 3 * 0x1p-11f) == 0x3c02);     // tie: rounds up to the even one
  CHECK(float_to_half(1.f + 0x1p-11f + 0x1p-20f) == 0x3c01);  // above the tie
  CHECK(float_to_half(65504.f) == 0x7bff);
  CHECK(float_to_half(65519.f) == 0x7bff);
  CHECK(float_to_half(65520.f) == 0x7c00);
  CHECK(float_to_half(-1e10f) == 0xfc00);
  CHECK(float_to_half(0x1p-24f) == 0x0001);               // smallest subnormal
  CHECK(float_to_half(0x1p-25f) == 0x0000);               // tie with zero: even
  CHECK(float_to_half(0x1.8p-25f) == 0x0001);
  CHECK(float_to_half(0x1.ffcp-15f) == 0x0400);           // rounds up into the normals
  CHECK(float_to_half(-0.f) == 0x8000);
}

#if defined(__FLT16_MAX__)
TEST_CASE("half: float -> fp16 agrees with the compiler's _Float16 on random floats") {
  std::mt19937 engine(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int n = 0; n < 1'000'000; ++n) {
    // Exponents around the fp16 range, random sign and mantissa.
    const uint32_t bits = (any_bits(engine) & 0x807fffff) | ((96 + n % 50) << 23);
    const float value = std::bit_cast<float>(bits);
    const _Float16 reference = static_cast<_Float16>(value);
    REQUIRE(float_to_half(value) == std::bit_cast<uint16_t>(reference));
  }
}
#endif

TEST_CASE("bf16: round to nearest even, NaN stays NaN") {
  CHECK(float_to_bf16(1.f) == 0x3f80);
  CHECK(float_to_bf16(1.f + 0x1p-8f) == 0x3f80);          // tie: even
  CHECK(float_to_bf16(1.f + 3 * 0x1p-8f) == 0x3f82);      // tie: up to even
  CHECK(float_to_bf16(1.f + 0x1p-8f + 0x1p-20f) == 0x3f81);
  CHECK(float_to_bf16(-2.5f) == 0xc020);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  CHECK(std::isinf(bf16_to_float(float_to_bf16(3.4e38f))));  // rounds past the largest bf16
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = bf16_to_float(static_cast<uint16_t>(bits));
    if (!std::isnan(value)) REQUIRE(float_to_bf16(value) == bits);
  }
  CHECK(std::isnan(decode(DType::BF16, kPoison16)));
  CHECK(std::isnan(decode(DType::F16, kPoison16)));
}

}  // namespace flashjit::verify
