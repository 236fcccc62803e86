// Reading files that may have been planted or damaged (runtime/bounded_read): what each rule
// refuses, and that nothing blocks or reads past the limit.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>

#include "flashjit/flashjit.h"
#include "runtime/bounded_read.h"
#include "tests/cpu/runtime_test_support.h"

using flashjit::rt::read_bounded_file;
using flashjit::rt::ReadRules;
using flashjit::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string refusal(const fs::path& path, const ReadRules& rules) {
  try {
    read_bounded_file(path.string(), rules, "test file");
  } catch (const flashjit::Error& error) {
    CHECK(error.kind() == flashjit::ErrorKind::Io);
    return error.what();
  }
  FAIL("read " << path);
  return "";
}

}  // namespace

TEST_CASE("bounded read: the bytes of a regular file, nullopt for nothing there") {
  TempDir dir;
  const fs::path path = dir.path() / "f";
  std::ofstream(path, std::ios::binary) << std::string("a\0b", 3);
  CHECK(read_bounded_file(path.string(), {3, true, true}, "test file") == std::string("a\0b", 3));
  CHECK_FALSE(read_bounded_file((dir.path() / "none").string(), {3}, "test file").has_value());
  CHECK(refusal(path, {2}).find("test file " + path.string() + ": 3 bytes, over the limit of 2") !=
        std::string::npos);
}

TEST_CASE("bounded read: links are followed only where the rules allow") {
  TempDir dir;
  const fs::path target = dir.path() / "target";
  std::ofstream(target) << "x";
  const fs::path link = dir.path() / "link";
  fs::create_symlink(target, link);
  CHECK(read_bounded_file(link.string(), {10, true}, "test file") == "x");
  CHECK(refusal(link, {10, false}).find("is a symbolic link") != std::string::npos);
}

TEST_CASE("bounded read: a folder and a FIFO are refused, the FIFO without blocking") {
  TempDir dir;
  CHECK(refusal(dir.path(), {10}).find("is a folder") != std::string::npos);
  const fs::path fifo = dir.path() / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(refusal(fifo, {10}).find("not a regular file") != std::string::npos);
}

TEST_CASE("bounded read: owned_by_me refuses a file others can write, or of another user") {
  TempDir dir;
  const fs::path path = dir.path() / "f";
  std::ofstream(path) << "x";
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_write);
  CHECK(read_bounded_file(path.string(), {10, true, false}, "test file") == "x");
  CHECK(refusal(path, {10, true, true}).find("writable by group or others (mode 0620)") !=
        std::string::npos);
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  if (::geteuid() != 0) {
    MESSAGE("skipped: making a file of another user needs root");
    return;
  }
  REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
  CHECK(refusal(path, {10, true, true}).find("is owned by uid 65534") != std::string::npos);
}
