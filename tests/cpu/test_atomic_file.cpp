// The atomic file writer: a new file, a replaced one, what it refuses to replace, and several
// processes writing one path at once, a writer killed mid-write.
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "flashjit/flashjit.h"
#include "runtime/atomic_file.h"
#include "tests/cpu/runtime_test_support.h"

using flashjit::Error;
using flashjit::ErrorKind;
using flashjit::rt::write_file_atomically;
using flashjit::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(dir)) names.push_back(item.path().filename());
  return names;
}

// The message of the Error(Io) that writing `path` throws.
std::string refusal(const fs::path& path) {
  try {
    write_file_atomically(path.string(), "new bytes", 0644, "bundle");
  } catch (const Error& error) {
    CHECK(error.kind() == ErrorKind::Io);
    return error.what();
  }
  FAIL("no error thrown for " << path);
  return "";
}

}  // namespace

TEST_CASE("atomic file: creates, then replaces, a regular file with the mode asked for") {
  TempDir dir;
  const fs::path path = dir.path() / "out.fjb";
  write_file_atomically(path.string(), "first", 0640, "bundle");
  CHECK(slurp(path) == "first");
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0640);
  write_file_atomically(path.string(), std::string("second\0binary", 13), 0644, "bundle");
  CHECK(slurp(path) == std::string("second\0binary", 13));
  CHECK(names_in(dir.path()) == std::vector<std::string>{"out.fjb"});  // no temporary left
}

TEST_CASE("atomic file: a symlink, a folder, a FIFO or a device node is refused and kept") {
  TempDir dir;
  const fs::path victim = dir.path() / "victim";
  std::ofstream(victim) << "precious";
  SUBCASE("symlink") {
    const fs::path link = dir.path() / "link";
    fs::create_symlink(victim, link);
    CHECK(refusal(link).find("symbolic link") != std::string::npos);
    CHECK(fs::is_symlink(link));
  }
  SUBCASE("folder") {
    const fs::path folder = dir.path() / "folder";
    fs::create_directory(folder);
    CHECK(refusal(folder).find("a folder") != std::string::npos);
    CHECK(fs::is_directory(folder));
  }
  SUBCASE("FIFO") {
    const fs::path fifo = dir.path() / "fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(refusal(fifo).find("FIFO") != std::string::npos);
    CHECK(fs::is_fifo(fifo));
  }
  SUBCASE("device node (a copy of /dev/full)") {
    const fs::path device = dir.path() / "full";
    if (::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) {
      MESSAGE("skipped: cannot make a device node here (needs root)");
      return;
    }
    CHECK(refusal(device).find("device node") != std::string::npos);
    CHECK(fs::is_character_file(device));
  }
  CHECK(slurp(victim) == "precious");
}

TEST_CASE("atomic file: a symlink planted at the old fixed temporary name is not followed") {
  TempDir dir;
  const fs::path victim = dir.path() / "victim";
  std::ofstream(victim) << "precious";
  const fs::path path = dir.path() / "app.fjb";
  fs::create_symlink(victim, path.string() + ".tmp");
  write_file_atomically(path.string(), "bundle bytes", 0644, "bundle");
  CHECK(slurp(path) == "bundle bytes");
  CHECK(slurp(victim) == "precious");
}

TEST_CASE("atomic file: a folder that does not exist is an Error(Io) naming the file") {
  TempDir dir;
  const fs::path path = dir.path() / "missing" / "db.json";
  const std::string message = refusal(path);
  CHECK(message.find(path.string()) != std::string::npos);
  CHECK(message.find("temporary") != std::string::npos);
}

TEST_CASE("atomic file: several processes writing one path leave one whole file") {
  TempDir dir;
  const fs::path path = dir.path() / "shared.bin";
  constexpr int kProcesses = 8;
  auto content = [](int writer) { return std::string(1 << 20, static_cast<char>('a' + writer)); };
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      try {
        for (int round = 0; round < 3; ++round)
          write_file_atomically(path.string(), content(i), 0644, "test file");
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const std::string final_bytes = slurp(path);
  bool whole = false;
  for (int i = 0; i < kProcesses; ++i) whole = whole || final_bytes == content(i);
  CHECK(whole);
  CHECK(names_in(dir.path()) == std::vector<std::string>{"shared.bin"});
}

TEST_CASE("atomic file: a writer killed at any moment leaves the old file or the new one whole") {
  TempDir dir;
  const fs::path path = dir.path() / "entry.bin";
  auto content = [](int generation) {
    return std::string(4 << 20, static_cast<char>('a' + generation % 26));
  };
  write_file_atomically(path.string(), content(0), 0644, "test file");
  // Each child rewrites the file in a loop and is killed (SIGKILL: no clean-up runs) after a
  // delay that varies, so the kills land in the write, the fsync and around the rename.
  for (int kill_round = 0; kill_round < 12; ++kill_round) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      for (int generation = 1;; ++generation)
        write_file_atomically(path.string(), content(generation), 0644, "test file");
    }
    usleep(2000 + 3000 * kill_round);
    REQUIRE(kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    const std::string bytes = slurp(path);
    CAPTURE(kill_round);
    REQUIRE(bytes.size() == content(0).size());
    CHECK(bytes == std::string(bytes.size(), bytes[0]));  // one writer's whole content
  }
  // What a killed writer leaves is its own temporary, never the entry's name.
  for (const std::string& name : names_in(dir.path()))
    CHECK((name == "entry.bin" || name.rfind("entry.bin.tmp-", 0) == 0));
}
