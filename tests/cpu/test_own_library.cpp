// flashjit's own NVRTC (runtime/own_library.h, runtime/nvrtc_compiler.cpp): where the process
// already holds NVRTC, flashjit compiles in a copy of that file, so that what another library
// compiles in the held instance does not change flashjit's kernels (bench/NOTES.md entries
// 55-56). flashjit opens NVRTC once a process, so each sequence runs in a child process: this
// binary again, running one of the "own NVRTC child" cases (skipped in an ordinary run).
#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "generator/emit.h"
#include "generator/plan.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime_test_support.h"

namespace fs = std::filesystem;
using flashjit::test::contains;
using flashjit::test::mode_of;
using flashjit::test::ScopedEnv;
using flashjit::test::slurp;
using flashjit::test::TempDir;

namespace {

// The toolkit's NVRTC, opened by path as torch opens its wheel's copy.
const std::string kHeldPath = std::string(FLASHJIT_CUDA_LIBRARY_DIR) + "/libnvrtc.so.13";
constexpr const char* kChildVariable = "FLASHJIT_OWN_NVRTC_OUT";  // set in children: where PTX goes

// The d256 decode combine kernel, whose PTX the held instance's -G compile changes.
struct Kernel {
  std::string name, source;
};
Kernel combine_d256() {
  const auto plan = flashjit::gen::make_plan(flashjit::test::spec_of(256, 256), "sm_90a", {},
                                             nullptr, flashjit::gen::Step::DecCombine);
  return {plan.kernel_name + ".cu", flashjit::gen::emit_source(plan)};
}

// An NVRTC instance used as another library would: its own calls, not flashjit's.
class Held {
 public:
  Held() : handle_(dlopen(kHeldPath.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    const char* why = handle_ ? nullptr : dlerror();
    REQUIRE_MESSAGE(handle_, (why ? why : ""));
  }
  // The PTX of `kernel` compiled with `options` (under flashjit's program name: PTX names it).
  std::string ptx(const Kernel& kernel, const std::vector<std::string>& options) const {
    auto create = symbol<decltype(&nvrtcCreateProgram)>("nvrtcCreateProgram");
    auto compile = symbol<decltype(&nvrtcCompileProgram)>("nvrtcCompileProgram");
    auto ptx_size = symbol<decltype(&nvrtcGetPTXSize)>("nvrtcGetPTXSize");
    auto get_ptx = symbol<decltype(&nvrtcGetPTX)>("nvrtcGetPTX");
    auto destroy = symbol<decltype(&nvrtcDestroyProgram)>("nvrtcDestroyProgram");
    nvrtcProgram program = nullptr;
    REQUIRE(create(&program, kernel.source.c_str(), kernel.name.c_str(), 0, nullptr, nullptr) ==
            NVRTC_SUCCESS);
    std::vector<const char*> pointers;
    for (const std::string& option : options) pointers.push_back(option.c_str());
    CHECK(compile(program, static_cast<int>(pointers.size()), pointers.data()) == NVRTC_SUCCESS);
    size_t size = 0;
    REQUIRE(ptx_size(program, &size) == NVRTC_SUCCESS);
    std::string out(size, '\0');
    REQUIRE(get_ptx(program, out.data()) == NVRTC_SUCCESS);
    destroy(&program);
    while (!out.empty() && out.back() == '\0') out.pop_back();
    return out;
  }
  // A program compiled with -G: what leaves state behind in the instance.
  void compile_debug(const Kernel& kernel) const {
    CHECK(!ptx(kernel, {"-std=c++17", "--gpu-architecture=sm_90a", "-default-device",
                               "-G", "--no-cache"})
               .empty());
  }
  std::string flashjit_options_ptx(const Kernel& kernel) const {
    return ptx(kernel, flashjit::rt::nvrtc_options("sm_90a"));
  }

 private:
  template <typename Fn>
  Fn symbol(const char* name) const {
    void* address = dlsym(handle_, name);
    REQUIRE_MESSAGE(address != nullptr, name);
    return reinterpret_cast<Fn>(address);
  }
  void* handle_;
};

std::string flashjit_ptx(const Kernel& kernel) {
  return flashjit::rt::nvrtc_compile(kernel.source, kernel.name, "sm_90a").ptx;
}

void write(const std::string& name, const std::string& text) {
  std::ofstream(fs::path(std::getenv(kChildVariable)) / name) << text;
}

// Runs this binary's child case `name` with `out` as the folder for its PTX; its output (the
// verbose lines included) in `log`. True when it passed.
bool run_child(const std::string& name, const TempDir& out, std::string& log) {
  ScopedEnv child(kChildVariable, out.str());
  ScopedEnv verbose("FLASHJIT_VERBOSE", "1");
  ScopedEnv forced("FLASHJIT_NVRTC_LIBRARY", std::nullopt);
  const std::string log_path = (out.path() / "log").string();
  const std::string command =
      fmt::format("'{}' --test-case='{}' --no-skip --no-version > '{}' 2>&1",
                  fs::read_symlink("/proc/self/exe").string(), name, log_path);
  const int status = std::system(command.c_str());
  log = slurp(log_path);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool can_run() {
  if (!fs::exists(kHeldPath)) {
    MESSAGE("skipped: no " << kHeldPath);
    return false;
  }
  if (!flashjit::rt::nvrtc_available()) {
    MESSAGE("skipped: " << flashjit::rt::nvrtc_unavailable_reason());
    return false;
  }
  return true;
}

// The copies under <cache>/nvrtc: "<folder>/<file>" each.
std::vector<std::string> copies(const TempDir& cache) {
  std::vector<std::string> found;
  std::error_code error;
  for (const auto& folder : fs::directory_iterator(cache.path() / "nvrtc", error))
    for (const auto& file : fs::directory_iterator(folder.path(), error))
      found.push_back(folder.path().filename().string() + "/" + file.path().filename().string());
  return found;
}

bool is_child() { return std::getenv(kChildVariable) != nullptr; }

}  // namespace

// ---- the children: each a sequence in a process of its own

TEST_CASE("own NVRTC child: flashjit compiles first" * doctest::skip()) {
  REQUIRE(is_child());
  Held held;  // before flashjit's first compile, as `import torch` is
  const Kernel kernel = combine_d256();
  const std::string clean = flashjit_ptx(kernel);
  // The held instance's first compile comes after the copy's (the order that crashed when
  // NVRTC was opened in a link-map namespace of its own): the same file, the same PTX.
  CHECK(held.flashjit_options_ptx(kernel) == clean);
  held.compile_debug(kernel);
  const std::string changed = held.flashjit_options_ptx(kernel);
  CHECK(changed != clean);  // the state the held instance keeps is real
  CHECK(flashjit_ptx(kernel) == clean);  // and flashjit's instance has none of it
  write("clean.ptx", clean);
  write("changed.ptx", changed);
}

TEST_CASE("own NVRTC child: the held instance compiles first" * doctest::skip()) {
  REQUIRE(is_child());
  Held held;
  const Kernel kernel = combine_d256();
  held.compile_debug(kernel);  // as cuDNN's first SDPA calls compile before flashjit's
  write("after_held.ptx", flashjit_ptx(kernel));
  write("held.ptx", held.flashjit_options_ptx(kernel));
}

// ---- the parent cases

TEST_CASE("own NVRTC: flashjit's kernels do not change with what the held instance compiled" *
          doctest::timeout(600)) {
  if (is_child() || !can_run()) return;
  TempDir cache;
  TempDir out;
  ScopedEnv cache_dir("FLASHJIT_CACHE_DIR", cache.str());
  ScopedEnv enabled("FLASHJIT_DISABLE_CACHE", std::nullopt);
  std::string log;

  // First opening: the copy is written, 0700 folders, one folder holding one file.
  REQUIRE_MESSAGE(run_child("own NVRTC child: flashjit compiles first", out, log), log);
  CHECK_MESSAGE(contains(log, "NVRTC: opened " + cache.str() + "/nvrtc/"), log);
  CHECK_MESSAGE(contains(log, "copied now"), log);
  const std::vector<std::string> first = copies(cache);
  REQUIRE(first.size() == 1);
  CHECK(contains(first[0], "/libnvrtc.so.13"));
  CHECK(fs::file_size(cache.path() / "nvrtc" / first[0]) == fs::file_size(kHeldPath));
  CHECK(mode_of(cache.path() / "nvrtc") == 0700);
  CHECK(mode_of((cache.path() / "nvrtc" / first[0]).parent_path()) == 0700);
  const std::string clean = slurp(out.path() / "clean.ptx");
  CHECK(!clean.empty());
  CHECK(slurp(out.path() / "changed.ptx") != clean);

  // Second opening, the other order: the copy is reused, flashjit's PTX is the clean one
  // where the held instance's is not.
  REQUIRE_MESSAGE(run_child("own NVRTC child: the held instance compiles first", out, log), log);
  CHECK_MESSAGE(contains(log, "the copy reused"), log);
  CHECK(copies(cache) == first);
  CHECK(slurp(out.path() / "after_held.ptx") == clean);
  CHECK(slurp(out.path() / "held.ptx") != clean);

  // A copy of another size (not the held file's) is written again.
  fs::resize_file(cache.path() / "nvrtc" / first[0], 1000);
  REQUIRE_MESSAGE(run_child("own NVRTC child: the held instance compiles first", out, log), log);
  CHECK_MESSAGE(contains(log, "copied now"), log);
  CHECK(copies(cache) == first);
  CHECK(fs::file_size(cache.path() / "nvrtc" / first[0]) == fs::file_size(kHeldPath));
  CHECK(slurp(out.path() / "after_held.ptx") == clean);
}

TEST_CASE("own NVRTC: without a usable cache folder flashjit shares the held instance, and "
          "says so" * doctest::timeout(600)) {
  if (is_child() || !can_run()) return;
  TempDir cache;
  TempDir out;
  ScopedEnv cache_dir("FLASHJIT_CACHE_DIR", cache.str());
  std::string log;
  SUBCASE("the cache disabled") {
    ScopedEnv disabled("FLASHJIT_DISABLE_CACHE", "1");
    REQUIRE_MESSAGE(run_child("own NVRTC child: the held instance compiles first", out, log), log);
    CHECK_MESSAGE(contains(log, "the disk cache is disabled (FLASHJIT_DISABLE_CACHE), so "
                                "flashjit compiles in that instance, shared"),
                  log);
  }
  SUBCASE("the cache folder writable by others") {
    ScopedEnv enabled("FLASHJIT_DISABLE_CACHE", std::nullopt);
    fs::permissions(cache.path(), fs::perms::all);
    REQUIRE_MESSAGE(run_child("own NVRTC child: the held instance compiles first", out, log), log);
    CHECK_MESSAGE(contains(log, "no copy of its own (cache folder " + cache.str() +
                                    " is writable by group or others"),
                  log);
    fs::permissions(cache.path(), fs::perms::owner_all);
  }
  CHECK(copies(cache).empty());
  CHECK(contains(log, kHeldPath));
  // One instance: flashjit's PTX is the held instance's, changed.
  CHECK(slurp(out.path() / "after_held.ptx") == slurp(out.path() / "held.ptx"));
}
