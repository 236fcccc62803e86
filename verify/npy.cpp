#include "verify/npy.h"

#include <bit>
#include <cctype>
#include <cstring>
#include <fstream>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "flashjit/flashjit.h"
#include "verify/half.h"

namespace flashjit::verify {

static_assert(std::endian::native == std::endian::little,
              "the .npy reader copies little-endian data straight into memory");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

Error io_error(const std::string& path, const std::string& what) {
  return Error(ErrorKind::Io, fmt::format("{}: {}", path, what));
}

// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// This parser accepts exactly the literals numpy writes there: quoted strings, True/False,
// tuples of non-negative integers.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : text_(text), path_(path) {}

  void parse(NpyArray& array, bool& fortran_order) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        array.descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran_order = boolean();
        have_order = true;
      } else if (key == "shape") {
        array.shape = tuple();
        have_shape = true;
      } else {
        throw fail(fmt::format("unexpected header key '{}'", key));
      }
      if (!peek('}')) expect(',');
    }
    if (!have_descr || !have_order || !have_shape)
      throw fail("header lacks one of 'descr', 'fortran_order', 'shape'");
  }

 private:
  Error fail(const std::string& what) const {
    return io_error(path_, fmt::format("bad .npy header ({}) in: {}", what, text_));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) throw fail(fmt::format("expected '{}' at offset {}", c, pos_));
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      throw fail(fmt::format("expected a quoted string at offset {}", pos_));
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string::npos) throw fail("unterminated string");
    std::string value = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (text_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return value;
      }
    }
    throw fail(fmt::format("expected True or False at offset {}", pos_));
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> values;
    expect('(');
    while (!peek(')')) {
      skip_space();
      const size_t start = pos_;
      int64_t value = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (value > (INT64_MAX - 9) / 10) throw fail("dimension too large");
        value = value * 10 + (text_[pos_++] - '0');
      }
      if (pos_ == start) throw fail(fmt::format("expected a dimension at offset {}", pos_));
      values.push_back(value);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return values;
  }

  const std::string& text_;
  const std::string& path_;
  size_t pos_ = 0;
};

int element_size(const std::string& descr) {
  if (descr == "<f2") return 2;
  if (descr == "<f4") return 4;
  if (descr == "<f8") return 8;
  return 0;
}

void write_npy(const std::string& path, const char* descr, std::span<const int64_t> shape,
               const void* data, size_t bytes) {
  std::string dims;
  for (int64_t dim : shape) dims += fmt::format("{}, ", dim);
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // numpy spells (n,) but (a, b)
  else if (shape.size() == 1) dims.pop_back();
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  // Version 1.0 stores the header length in 2 bytes; the data starts on a 64-byte boundary
  // and the header ends with '\n' (numpy pads with spaces).
  const size_t prefix = kMagicSize + 2 + 2;
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');
  if (header.size() > 0xffff)
    throw io_error(path, "array has too many dimensions for a version 1.0 .npy header");

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw io_error(path, "cannot open for writing");
  const char version[2] = {1, 0};
  const uint16_t header_len = static_cast<uint16_t>(header.size());
  out.write(kMagic, kMagicSize);
  out.write(version, 2);
  out.write(reinterpret_cast<const char*>(&header_len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) throw io_error(path, "write failed");
}

int64_t product(std::span<const int64_t> shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

}  // namespace

int64_t NpyArray::elements() const { return product(shape); }

std::string shape_string(std::span<const int64_t> shape) {
  std::string text = "(";
  for (size_t n = 0; n < shape.size(); ++n)
    text += fmt::format("{}{}", n ? ", " : "", shape[n]);
  return text + ")";
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error(path, "cannot open for reading");
  char magic[kMagicSize];
  unsigned char version[2];
  if (!in.read(magic, kMagicSize) || std::memcmp(magic, kMagic, kMagicSize) != 0)
    throw io_error(path, "not a NumPy .npy file (bad magic string)");
  if (!in.read(reinterpret_cast<char*>(version), 2)) throw io_error(path, "truncated header");
  size_t header_len = 0;
  if (version[0] == 1) {
    unsigned char len[2];
    if (!in.read(reinterpret_cast<char*>(len), 2)) throw io_error(path, "truncated header");
    header_len = len[0] | (len[1] << 8);
  } else if (version[0] == 2 || version[0] == 3) {  // 3.0 only changes the header encoding
    unsigned char len[4];
    if (!in.read(reinterpret_cast<char*>(len), 4)) throw io_error(path, "truncated header");
    header_len = len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<size_t>(len[3]) << 24);
  } else {
    throw io_error(path, fmt::format(".npy format version {}.{} is not supported", version[0],
                                     version[1]));
  }
  std::string header(header_len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_len)))
    throw io_error(path, "truncated header");

  NpyArray array;
  bool fortran_order = false;
  HeaderParser(header, path).parse(array, fortran_order);
  if (fortran_order)
    throw io_error(path, "Fortran-order arrays are not supported; save with "
                         "np.ascontiguousarray(a)");
  const int size = element_size(array.descr);
  if (size == 0)
    throw io_error(path, fmt::format("dtype '{}' is not supported: use float16 or float32 "
                                     "(little-endian; save bf16 as float32)",
                                     array.descr));

  const int64_t count = array.elements();
  std::vector<char> raw(static_cast<size_t>(count) * size);
  if (!in.read(raw.data(), static_cast<std::streamsize>(raw.size())))
    throw io_error(path, fmt::format("data ends early: shape {} of {} needs {} bytes",
                                     shape_string(array.shape), array.descr, raw.size()));
  array.values.resize(static_cast<size_t>(count));
  for (int64_t n = 0; n < count; ++n) {
    const char* at = raw.data() + n * size;
    if (size == 2) {
      uint16_t bits;
      std::memcpy(&bits, at, 2);
      array.values[n] = half_to_float(bits);
    } else if (size == 4) {
      std::memcpy(&array.values[n], at, 4);
    } else {
      double value;
      std::memcpy(&value, at, 8);
      array.values[n] = static_cast<float>(value);
    }
  }
  return array;
}

void write_npy_f32(const std::string& path, std::span<const int64_t> shape,
                   std::span<const float> values) {
  if (static_cast<int64_t>(values.size()) != product(shape))
    throw io_error(path, fmt::format("{} values do not fill shape {}", values.size(),
                                     shape_string(shape)));
  write_npy(path, "<f4", shape, values.data(), values.size_bytes());
}

void write_npy_f16(const std::string& path, std::span<const int64_t> shape,
                   std::span<const uint16_t> bits) {
  if (static_cast<int64_t>(bits.size()) != product(shape))
    throw io_error(path, fmt::format("{} values do not fill shape {}", bits.size(),
                                     shape_string(shape)));
  write_npy(path, "<f2", shape, bits.data(), bits.size_bytes());
}

}  // namespace flashjit::verify
