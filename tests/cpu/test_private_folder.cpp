// runtime/private_folder.h: the rules of the folders flashjit loads from (the disk cache's
// kernels, NVRTC's copy), tested on their own; test_cache.cpp tests them through the cache.
#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>

#include "runtime/private_folder.h"
#include "runtime_test_support.h"

namespace fs = std::filesystem;
using flashjit::rt::check_private_folder;
using flashjit::rt::create_private_folder;
using flashjit::test::error_of_kind;
using flashjit::test::mode_of;
using flashjit::test::TempDir;

TEST_CASE("private folder: made 0700 with its parents, an existing one left as it is") {
  TempDir dir;
  const fs::path made = dir.path() / "a" / "b";
  create_private_folder(made.string());
  CHECK(mode_of(made) == 0700);
  CHECK(error_of_kind(flashjit::ErrorKind::Cache, [&] { check_private_folder(made.string()); })
            .empty());
  fs::permissions(made, fs::perms::owner_all | fs::perms::group_read);
  create_private_folder(made.string());
  CHECK(mode_of(made) == 0740);
}

TEST_CASE("private folder: one writable by group or others, a file or nothing is refused") {
  TempDir dir;
  const auto refusal = [](const fs::path& path) {
    return error_of_kind(flashjit::ErrorKind::Cache, [&] { check_private_folder(path.string()); });
  };
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_write);
  CHECK(refusal(dir.path()).find("is writable by group or others (mode 0720)") !=
        std::string::npos);
  fs::permissions(dir.path(), fs::perms::owner_all);
  std::ofstream(dir.path() / "file") << "x";
  CHECK(refusal(dir.path() / "file").find("is not a folder") != std::string::npos);
  CHECK(refusal(dir.path() / "missing").find("No such file") != std::string::npos);
}
