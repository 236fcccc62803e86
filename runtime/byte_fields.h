// Little-endian integers and length-prefixed byte strings: the primitives of the artifact
// format (runtime/artifact.h) and of the cache key's canonical serialization. The reader
// never runs past its input and never trusts a length it has not checked against what is left.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace flashjit::rt {

class ByteWriter {
 public:
  void u32(uint32_t value) { integer(value, 4); }
  void u64(uint64_t value) { integer(value, 8); }
  void raw(std::string_view bytes) { out_.append(bytes); }
  void field(std::string_view bytes) {
    u64(bytes.size());
    raw(bytes);
  }
  const std::string& bytes() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void integer(uint64_t value, int size) {
    for (int i = 0; i < size; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  std::string out_;
};

// Each read returns false (and leaves its output unspecified) when the input is too short.
class ByteReader {
 public:
  explicit ByteReader(std::string_view data) : data_(data) {}
  bool u32(uint32_t& value) {
    uint64_t wide = 0;
    if (!integer(wide, 4)) return false;
    value = static_cast<uint32_t>(wide);
    return true;
  }
  bool u64(uint64_t& value) { return integer(value, 8); }
  bool raw(std::string_view& out, uint64_t size) {
    if (size > left()) return false;
    out = data_.substr(pos_, size);
    pos_ += size;
    return true;
  }
  // A length-prefixed field of at most `max_size` bytes.
  bool field(std::string_view& out, uint64_t max_size) {
    uint64_t size = 0;
    return u64(size) && size <= max_size && raw(out, size);
  }
  uint64_t left() const { return data_.size() - pos_; }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  bool integer(uint64_t& value, int size) {
    if (left() < static_cast<uint64_t>(size)) return false;
    value = 0;
    for (int i = 0; i < size; ++i)
      value |= static_cast<uint64_t>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    pos_ += size;
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
};

}  // namespace flashjit::rt
