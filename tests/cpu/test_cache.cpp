// The disk cache: keys, round trips, corrupt entries, the switches in the environment,
// several processes writing one key at once, and what it trusts (issue 18: the folder and
// entries of this user only; FIFOs, folders, links, huge files and unparsable logs at an
// entry's name are misses that get rewritten).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "runtime/disk_cache.h"
#include "runtime/env.h"
#include "runtime/kernel_compiler.h"
#include "runtime/nvrtc_compiler.h"
#include "tests/cpu/runtime_test_support.h"

using flashjit::rt::cache_key;
using flashjit::rt::Artifact;
using flashjit::rt::CacheKeyInput;
using flashjit::rt::DiskCache;
using flashjit::test::fake_cubin;
using flashjit::test::mode_of;
using flashjit::test::ScopedEnv;
using flashjit::test::TempDir;
namespace fs = std::filesystem;

namespace {

CacheKeyInput sample_key_input() {
  return {"0.1.0", "extern \"C\" __global__ void k() {}", "13.0",
          {"-std=c++17", "--gpu-architecture=sm_80", "-lineinfo"}, "sm_80"};
}

// An entry for `key` whose cubin is `cubin_bytes` bytes of noise after an ELF header.
Artifact sample_entry(const std::string& key, size_t cubin_bytes = 4096) {
  std::string noise(cubin_bytes, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>(i * 131 + 7);
  Artifact entry;
  entry.cache_key = key;
  entry.kernel_name = "fa_test_kernel";
  entry.target = "sm_80";
  entry.source_sha256 = std::string(64, 'a');
  entry.spec_name = "test";
  entry.spec_yaml = "name: test\n";
  entry.tiles = {64, 64, 4, 2};
  entry.cubin = fake_cubin(noise);
  entry.ptx = ".version 9.0\n.target sm_80\n";
  entry.ptxas_log = "ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]\n";
  return entry;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(dir)) names.push_back(item.path().filename());
  return names;
}

}  // namespace

TEST_CASE("cache key: hex SHA-256 that changes with every input") {
  const CacheKeyInput base = sample_key_input();
  const std::string key = cache_key(base);
  CHECK(key.size() == 64);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(cache_key(base) == key);

  auto changed = [&](auto mutate) {
    CacheKeyInput input = base;
    mutate(input);
    return cache_key(input);
  };
  CHECK(changed([](CacheKeyInput& i) { i.generator_version = "0.1.1"; }) != key);
  CHECK(changed([](CacheKeyInput& i) { i.source += " "; }) != key);
  CHECK(changed([](CacheKeyInput& i) { i.nvrtc_version = "13.1"; }) != key);
  CHECK(changed([](CacheKeyInput& i) { i.options.push_back("-DNDEBUG"); }) != key);
  CHECK(changed([](CacheKeyInput& i) { i.options[2] = "-G"; }) != key);
  CHECK(changed([](CacheKeyInput& i) { i.target = "sm_90a"; }) != key);
  // Length prefixes keep field boundaries: moving text from one field to the next changes it.
  CHECK(changed([](CacheKeyInput& i) {
          i.generator_version += "1";
          i.source = i.source.substr(1);
        }) != key);
}

TEST_CASE("cache key: the order of the options does not matter") {
  CacheKeyInput reordered = sample_key_input();
  std::reverse(reordered.options.begin(), reordered.options.end());
  CHECK(cache_key(reordered) == cache_key(sample_key_input()));
}

TEST_CASE("disk cache: store then load gives the entry back") {
  TempDir dir;
  const DiskCache cache(dir.str() + "/nested/cache", true);
  const std::string key = cache_key(sample_key_input());
  const Artifact entry = sample_entry(key);

  CHECK_FALSE(cache.load(entry.kernel_name, key).has_value());
  cache.store(entry);
  const auto loaded = cache.load(entry.kernel_name, key);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == entry);
  CHECK(cache.path_for(entry.kernel_name, key) ==
        dir.str() + "/nested/cache/fa_test_kernel-" + key + ".fjk");

  const auto stats = cache.stats();
  CHECK(stats.enabled);
  CHECK(stats.entries == 1);
  CHECK(stats.bytes > entry.cubin.size());
  // Another key under the same kernel name is a miss.
  CHECK_FALSE(cache.load(entry.kernel_name, std::string(64, '0')).has_value());
}

TEST_CASE("disk cache: a truncated, altered or wrong-version entry is a miss and gets rewritten") {
  TempDir dir;
  const DiskCache cache(dir.str(), true);
  const std::string key = cache_key(sample_key_input());
  const Artifact entry = sample_entry(key);
  const std::string path = cache.path_for(entry.kernel_name, key);
  cache.store(entry);
  const std::string good = read_file(path);

  auto check_corruption = [&](const std::string& bytes) {
    write_file(path, bytes);
    CHECK_FALSE(cache.load(entry.kernel_name, key).has_value());
    cache.store(entry);  // the next store repairs it
    const auto loaded = cache.load(entry.kernel_name, key);
    REQUIRE(loaded.has_value());
    CHECK(*loaded == entry);
  };
  SUBCASE("truncated") { check_corruption(good.substr(0, good.size() / 2)); }
  SUBCASE("truncated to nothing") { check_corruption(""); }
  SUBCASE("one byte flipped in the cubin") {
    std::string bad = good;
    bad[good.size() / 2] ^= 0x40;
    check_corruption(bad);
  }
  SUBCASE("one byte flipped in the checksum") {
    std::string bad = good;
    bad.back() ^= 0x01;
    check_corruption(bad);
  }
  SUBCASE("another format version") {
    std::string bad = good;
    bad[8] = static_cast<char>(bad[8] + 1);  // the u32 after the 8-byte magic
    check_corruption(bad);
  }
  SUBCASE("trailing garbage") { check_corruption(good + "x"); }
  SUBCASE("another key's entry under this name") {
    const std::string other = cache_key({"x", "y", "z", {}, "sm_80"});
    cache.store(sample_entry(other));
    check_corruption(read_file(cache.path_for(entry.kernel_name, other)));
  }
}

TEST_CASE("disk cache: a disabled cache neither loads nor stores") {
  TempDir dir;
  const DiskCache cache(dir.str(), false);
  const std::string key = cache_key(sample_key_input());
  cache.store(sample_entry(key));
  CHECK(files_in(dir.path()).empty());
  CHECK_FALSE(cache.load("fa_test_kernel", key).has_value());
  CHECK_FALSE(cache.stats().enabled);
}

TEST_CASE("environment: FLASHJIT_CACHE_DIR, XDG_CACHE_HOME, HOME and FLASHJIT_DISABLE_CACHE") {
  ScopedEnv disable("FLASHJIT_DISABLE_CACHE", std::nullopt);
  {
    ScopedEnv dir("FLASHJIT_CACHE_DIR", "/tmp/fj-explicit");
    ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
    CHECK(DiskCache::from_env().dir() == "/tmp/fj-explicit");
    CHECK(DiskCache::from_env().enabled());
  }
  {
    ScopedEnv dir("FLASHJIT_CACHE_DIR", std::nullopt);
    ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
    CHECK(DiskCache::from_env().dir() == "/tmp/xdg/flashjit");
  }
  {
    ScopedEnv dir("FLASHJIT_CACHE_DIR", std::nullopt);
    ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
    ScopedEnv home("HOME", "/home/someone");
    CHECK(DiskCache::from_env().dir() == "/home/someone/.cache/flashjit");
  }
  {
    ScopedEnv off("FLASHJIT_DISABLE_CACHE", "1");
    CHECK_FALSE(DiskCache::from_env().enabled());
  }
  {
    ScopedEnv off("FLASHJIT_DISABLE_CACHE", "0");
    CHECK(DiskCache::from_env().enabled());
  }
}

TEST_CASE("disk cache: several processes storing one key at once leave one valid file") {
  TempDir dir;
  const DiskCache cache(dir.str(), true);
  const std::string key = cache_key(sample_key_input());
  const Artifact entry = sample_entry(key, 8 << 20);  // large, so the writes overlap in time

  constexpr int kProcesses = 8;
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Child: store and read back a few times, racing the others; no doctest in here.
      for (int round = 0; round < 3; ++round) {
        cache.store(entry);
        const auto loaded = cache.load(entry.kernel_name, key);
        // A reader may see no file yet, never a torn one.
        if (loaded && *loaded != entry) _exit(1);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const auto loaded = cache.load(entry.kernel_name, key);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == entry);
  // Exactly the entry: every temporary file was renamed into place.
  const std::vector<std::string> names = files_in(dir.path());
  REQUIRE(names.size() == 1);
  CHECK(names[0] == fs::path(cache.path_for(entry.kernel_name, key)).filename());
}

TEST_CASE("disk cache: clear removes entries and stale temporary files") {
  TempDir dir;
  const DiskCache cache(dir.str(), true);
  cache.store(sample_entry(cache_key(sample_key_input())));
  cache.store(sample_entry(cache_key({"a", "b", "c", {}, "sm_90a"})));
  write_file(dir.str() + "/fa_test_kernel-abc.fjk.tmp-XYZ123", "left by a killed writer");
  write_file(dir.str() + "/notes.txt", "not ours");
  CHECK(cache.stats().entries == 2);
  CHECK(cache.clear() == 2);
  CHECK(cache.stats().entries == 0);
  CHECK(files_in(dir.path()) == std::vector<std::string>{"notes.txt"});
}

namespace {

constexpr uid_t kOtherUser = 65534;  // nobody

// The message of the Error(Cache) that a load from `cache` throws.
std::string load_refusal(const DiskCache& cache, const std::string& key) {
  try {
    cache.load("fa_test_kernel", key);
  } catch (const flashjit::Error& error) {
    CHECK(error.kind() == flashjit::ErrorKind::Cache);
    return error.what();
  }
  FAIL("the load was not refused");
  return "";
}

}  // namespace

TEST_CASE("disk cache: the folder is created 0700, entries 0600") {
  TempDir dir;
  const DiskCache cache(dir.str() + "/made/here", true);
  const std::string key = cache_key(sample_key_input());
  cache.store(sample_entry(key));
  CHECK(mode_of(cache.dir()) == 0700);
  CHECK(mode_of(cache.path_for("fa_test_kernel", key)) == 0600);
}

TEST_CASE("disk cache: a folder writable by group or others is refused, naming the fix") {
  TempDir dir;
  const DiskCache cache(dir.str(), true);
  const std::string key = cache_key(sample_key_input());
  cache.store(sample_entry(key));
  fs::permissions(dir.path(), fs::perms::all);  // 0777, as /tmp is
  const std::string message = load_refusal(cache, key);
  CHECK(message.find("cache folder " + dir.str() + " is writable by group or others") !=
        std::string::npos);
  CHECK(message.find("FLASHJIT_CACHE_DIR") != std::string::npos);
  fs::permissions(dir.path(), fs::perms::owner_all);
  CHECK(cache.load("fa_test_kernel", key).has_value());
}

TEST_CASE("disk cache: a folder owned by another user is refused") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: making a folder of another user needs root");
    return;
  }
  TempDir dir;
  const DiskCache cache(dir.str(), true);
  const std::string key = cache_key(sample_key_input());
  cache.store(sample_entry(key));
  REQUIRE(::chown(dir.str().c_str(), kOtherUser, kOtherUser) == 0);
  CHECK(load_refusal(cache, key).find("is owned by uid 65534, not by this user") !=
        std::string::npos);
}

TEST_CASE("disk cache: an entry of another user or writable by others is not loaded, then "
          "replaced") {
  TempDir dir;
  const DiskCache cache(dir.str(), true);
  const std::string key = cache_key(sample_key_input());
  const Artifact entry = sample_entry(key);
  const std::string path = cache.path_for(entry.kernel_name, key);
  cache.store(entry);
  SUBCASE("writable by others") { fs::permissions(path, fs::perms::all); }
  SUBCASE("owned by another user") {
    if (::geteuid() != 0) {
      MESSAGE("skipped: making a file of another user needs root");
      return;
    }
    REQUIRE(::chown(path.c_str(), kOtherUser, kOtherUser) == 0);
  }
  CHECK_FALSE(cache.load(entry.kernel_name, key).has_value());
  cache.store(entry);
  const auto loaded = cache.load(entry.kernel_name, key);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == entry);
}

TEST_CASE("disk cache: a FIFO, a folder, a link or a sparse 5 GB file at an entry's name is a "
          "miss, and the next store replaces it") {
  TempDir dir;
  const DiskCache cache(dir.str(), true);
  const std::string key = cache_key(sample_key_input());
  const Artifact entry = sample_entry(key);
  const std::string path = cache.path_for(entry.kernel_name, key);
  SUBCASE("FIFO (opened without blocking)") { REQUIRE(::mkfifo(path.c_str(), 0600) == 0); }
  SUBCASE("folder with a file in it") {
    fs::create_directory(path);
    write_file(path + "/inside", "x");
  }
  SUBCASE("symlink to a valid entry (not followed)") {
    const std::string elsewhere = dir.str() + "/elsewhere.bin";
    cache.store(entry);
    fs::rename(path, elsewhere);
    fs::create_symlink(elsewhere, path);
  }
  SUBCASE("sparse file past the size limit (refused from its size, unread)") {
    { std::ofstream touch(path); }
    fs::resize_file(path, uint64_t{5} << 30);
  }
  CHECK_FALSE(cache.load(entry.kernel_name, key).has_value());
  cache.store(entry);
  CHECK(fs::is_regular_file(fs::symlink_status(path)));
  const auto loaded = cache.load(entry.kernel_name, key);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == entry);
}

TEST_CASE("kernel compiler: a cached ptxas log with a number past int is a miss that is "
          "recompiled and rewritten") {
  if (!flashjit::rt::nvrtc_available()) {
    MESSAGE("skipped: NVRTC is not installed");
    return;
  }
  TempDir dir;
  flashjit::Spec spec;
  spec.name = "cache_log";
  spec.head_dim_qk = spec.head_dim_v = 64;
  const auto plan = flashjit::gen::make_plan(spec, "sm_80");
  const DiskCache cache(dir.str(), true);
  const auto first = flashjit::rt::KernelCompiler(cache).compile(plan);
  Artifact poisoned = first->artifacts;
  poisoned.ptxas_log = "ptxas info    : Used 99999999999999999999 registers\n";
  cache.store(poisoned);

  const auto before = flashjit::rt::nvrtc_invocations();
  const auto second = flashjit::rt::KernelCompiler(cache).compile(plan);
  CHECK(flashjit::rt::nvrtc_invocations() == before + 1);
  CHECK_FALSE(second->report.cache_hit);
  const auto rewritten = cache.load(plan.kernel_name, first->artifacts.cache_key);
  REQUIRE(rewritten.has_value());
  CHECK(rewritten->ptxas_log.find("99999999999999999999") == std::string::npos);
  // And the rewritten entry is a hit again.
  const auto third = flashjit::rt::KernelCompiler(cache).compile(plan);
  CHECK(flashjit::rt::nvrtc_invocations() == before + 1);
  CHECK(third->report.cache_hit);
}
