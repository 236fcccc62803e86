// Helpers shared by the runtime's CPU tests: a scratch directory and scoped environment
// variables (the runtime reads FLASHJIT_* on every call, so tests can point it elsewhere).
#pragma once

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "flashjit/flashjit.h"

namespace flashjit::test {

// A fresh directory under the system temp folder, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "flashjit-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Sets (or, with nullopt, unsets) an environment variable and restores it on scope exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Bytes that pass the artifact format's cubin check (an ELF64 header for EM_CUDA) followed by
// `payload`; no driver ever loads them.
inline std::string fake_cubin(const std::string& payload = "fake cubin") {
  std::string elf(64, '\0');
  elf.replace(0, 4, "\x7f" "ELF");
  elf[4] = 2;            // ELFCLASS64
  elf[5] = 1;            // little-endian
  elf[18] = char(190);  // e_machine: EM_CUDA
  return elf + payload;
}

// A file's whole text ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A path's permission bits (lstat: a link's own); throws when there is nothing there.
inline mode_t mode_of(const std::filesystem::path& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) throw std::runtime_error("cannot lstat " + path.string());
  return info.st_mode & 07777;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What `call` throws: the message of an Error of `kind`, "" when it throws nothing, and for
// an Error of another kind its message after a line no test expects.
template <class Call>
std::string error_of_kind(ErrorKind kind, Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.kind() == kind ? e.what() : std::string("(an Error of another kind)\n") + e.what();
  }
  return "";
}

// A spec named "t" with these head dims and every other field at its default.
inline Spec spec_of(int dqk, int dv) {
  Spec s;
  s.name = "t";
  s.head_dim_qk = dqk;
  s.head_dim_v = dv;
  return s;
}

}  // namespace flashjit::test
