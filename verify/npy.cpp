#include "verify/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
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
// numpy's own reader refuses headers over 10000 bytes unless told otherwise; a header of ours
// is a few hundred bytes, so this only stops a forged length from sizing an allocation.
constexpr uint64_t kMaxHeaderBytes = 1 << 16;
// Header text echoed in an error is cut here: a forged header may be any bytes, of any length.
constexpr size_t kMaxEchoedChars = 200;

Error io_error(const std::string& path, const std::string& what) {
  return Error(ErrorKind::Io, fmt::format("{}: {}", path, what));
}

// `text` in quotes with non-printable characters escaped, cut at kMaxEchoedChars.
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (unsigned char c : text.substr(0, kMaxEchoedChars)) {
    if (c == '\\' || c == '\'') out += fmt::format("\\{}", static_cast<char>(c));
    else if (std::isprint(c)) out.push_back(static_cast<char>(c));
    else out += fmt::format("\\x{:02x}", c);
  }
  out += "'";
  if (text.size() > kMaxEchoedChars) out += fmt::format(" (cut: {} bytes in all)", text.size());
  return out;
}

// The open file and how many of its bytes are still unread: every length the file claims is
// checked against that before it sizes an allocation. Only a regular file has a size to check
// against (a FIFO would also block the open without O_NONBLOCK).
class NpyFile {
 public:
  explicit NpyFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0)
      throw io_error(path, fmt::format("cannot open for reading: {}", std::strerror(errno)));
    struct stat info {};
    if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd_);
      throw io_error(path, S_ISDIR(info.st_mode) ? "is a folder, not a .npy file"
                                                 : "is not a regular file");
    }
    left_ = static_cast<uint64_t>(info.st_size);
  }
  ~NpyFile() { ::close(fd_); }
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;

  uint64_t left() const { return left_; }

  // The next `size` bytes of the magic, version, length or header.
  void read_prefix(void* into, size_t size) {
    if (size > left_) throw io_error(path_, "truncated header");
    read_exactly(static_cast<char*>(into), size);
  }

  // The data: `values.size()` little-endian elements of `element_size` bytes, converted to
  // float a chunk at a time so that only the floats are held in memory.
  void read_values(int element_size, std::vector<float>& values) {
    constexpr size_t kChunkElements = 1 << 12;
    char chunk[kChunkElements * 8];
    for (size_t first = 0; first < values.size(); first += kChunkElements) {
      const size_t count = std::min(kChunkElements, values.size() - first);
      read_exactly(chunk, count * element_size);
      for (size_t n = 0; n < count; ++n) values[first + n] = element(chunk, n, element_size);
    }
  }

 private:
  static float element(const char* chunk, size_t n, int element_size) {
    const char* at = chunk + n * element_size;
    if (element_size == 2) {
      uint16_t bits;
      std::memcpy(&bits, at, 2);
      return half_to_float(bits);
    }
    if (element_size == 4) {
      float value;
      std::memcpy(&value, at, 4);
      return value;
    }
    double value;
    std::memcpy(&value, at, 8);
    return static_cast<float>(value);
  }

  void read_exactly(char* into, size_t size) {
    while (size > 0) {
      const ssize_t n = ::read(fd_, into, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw io_error(path_, fmt::format("read failed: {}", std::strerror(errno)));
      if (n == 0) throw io_error(path_, "the file shrank while it was read");
      into += n;
      size -= static_cast<size_t>(n);
      left_ -= static_cast<uint64_t>(n);
    }
  }

  const std::string& path_;
  int fd_ = -1;
  uint64_t left_ = 0;
};

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
      bool* have = key == "descr"           ? &have_descr
                   : key == "fortran_order" ? &have_order
                   : key == "shape"         ? &have_shape
                                            : nullptr;
      if (!have) throw fail(fmt::format("unexpected header key {}", quoted(key)));
      if (*have) throw fail(fmt::format("header key {} given twice", quoted(key)));
      *have = true;
      if (key == "descr") array.descr = string_literal();
      else if (key == "fortran_order") fortran_order = boolean();
      else array.shape = tuple();
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != text_.size())
      throw fail(fmt::format("text after the closing '}}' at offset {}", pos_));
    if (!have_descr || !have_order || !have_shape)
      throw fail("header lacks one of 'descr', 'fortran_order', 'shape'");
  }

 private:
  Error fail(const std::string& what) const {
    return io_error(path_, fmt::format("bad .npy header ({}) in: {}", what, quoted(text_)));
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

// The product of the dimensions, or nullopt when it overflows 64 bits.
std::optional<uint64_t> checked_product(std::span<const int64_t> dims) {
  uint64_t product = 1;
  for (int64_t dim : dims)
    if (dim < 0 || __builtin_mul_overflow(product, static_cast<uint64_t>(dim), &product))
      return std::nullopt;
  return product;
}

// A dimension list's element count for arrays already in memory (their product fits).
int64_t product(std::span<const int64_t> shape) {
  const std::optional<uint64_t> count = checked_product(shape);
  if (!count || *count > INT64_MAX) throw Error(ErrorKind::Usage, "shape overflows int64");
  return static_cast<int64_t>(*count);
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
  NpyFile file(path);
  char magic[kMagicSize];
  unsigned char version[2];
  file.read_prefix(magic, kMagicSize);
  if (std::memcmp(magic, kMagic, kMagicSize) != 0)
    throw io_error(path, "not a NumPy .npy file (bad magic string)");
  file.read_prefix(version, 2);
  uint64_t header_len = 0;
  if (version[0] == 1) {
    unsigned char len[2];
    file.read_prefix(len, 2);
    header_len = len[0] | (len[1] << 8);
  } else if (version[0] == 2 || version[0] == 3) {  // 3.0 only changes the header encoding
    unsigned char len[4];
    file.read_prefix(len, 4);
    header_len = len[0] | (len[1] << 8) | (len[2] << 16) | (uint64_t{len[3]} << 24);
  } else {
    throw io_error(path, fmt::format(".npy format version {}.{} is not supported", version[0],
                                     version[1]));
  }
  if (header_len > kMaxHeaderBytes)
    throw io_error(path, fmt::format("header length {} is over the limit of {} bytes (numpy "
                                     "writes a few hundred)",
                                     header_len, kMaxHeaderBytes));
  if (header_len > file.left())
    throw io_error(path, fmt::format("header length {} runs past the end of the file ({} "
                                     "bytes left after the prefix)",
                                     header_len, file.left()));
  std::string header(header_len, '\0');
  file.read_prefix(header.data(), header.size());

  NpyArray array;
  bool fortran_order = false;
  HeaderParser(header, path).parse(array, fortran_order);
  if (fortran_order)
    throw io_error(path, "Fortran-order arrays are not supported; save with "
                         "np.ascontiguousarray(a)");
  const int size = element_size(array.descr);
  if (size == 0)
    throw io_error(path, fmt::format("dtype {} is not supported: use float16 or float32 "
                                     "(little-endian; save bf16 as float32)",
                                     quoted(array.descr)));

  // Sized against the file before anything is allocated: a header may claim any shape.
  const std::optional<uint64_t> count = checked_product(array.shape);
  uint64_t bytes = 0;
  if (!count || __builtin_mul_overflow(*count, uint64_t(size), &bytes))
    throw io_error(path, fmt::format("shape {} of {} holds more bytes than 2^64",
                                     shape_string(array.shape), array.descr));
  if (bytes > file.left())
    throw io_error(path, fmt::format("data ends early: shape {} of {} needs {} bytes, the file "
                                     "holds {} after the header",
                                     shape_string(array.shape), array.descr, bytes,
                                     file.left()));
  if (bytes < file.left())
    throw io_error(path, fmt::format("{} bytes after the data of shape {} of {} (not a file "
                                     "numpy wrote)",
                                     file.left() - bytes, shape_string(array.shape),
                                     array.descr));
  array.values.resize(*count);
  file.read_values(size, array.values);
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
