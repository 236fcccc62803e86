#include "runtime/nvrtc_compiler.h"

#include "runtime/env.h"
#include "runtime/own_library.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "flashjit/flashjit.h"

namespace flashjit::rt {
namespace {

std::atomic<uint64_t> g_invocations{0};

// The libraries tried in order when FLASHJIT_NVRTC_LIBRARY is not set: this toolkit's soname
// first, then the unversioned development link.
constexpr const char* kNvrtcLibraries[] = {"libnvrtc.so.13", "libnvrtc.so"};

// The NVRTC entry points flashjit uses, resolved from the dlopen'ed library. Loaded on the
// first compile (or version query), never at start-up: an application whose kernels all come
// from registered bundles runs on a machine without libnvrtc.
struct NvrtcApi {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create_program = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program = nullptr;
  decltype(&::nvrtcGetProgramLogSize) program_log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) program_log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
  std::string failure;  // why NVRTC could not be loaded ("" when it was)
};

// FLASHJIT_NVRTC_LIBRARY, when set, names the one library to open.
std::vector<std::string> library_candidates() {
  if (std::string forced = nvrtc_library(); !forced.empty()) return {forced};
  return {std::begin(kNvrtcLibraries), std::end(kNvrtcLibraries)};
}

template <typename Fn>
bool resolve(void* library, const char* name, Fn& slot, std::string& failure) {
  slot = reinterpret_cast<Fn>(dlsym(library, name));
  if (!slot && failure.empty()) failure = fmt::format("symbol {} not found", name);
  return slot != nullptr;
}

// NVRTC keeps state from one program to the next inside one instance of the library: after
// a program compiled with -G or --Ofast-compile=max (or cuDNN's runtime compiles) the same
// source comes out as other PTX (bench/NOTES.md entries 55-56). So where the process already
// holds NVRTC (torch's wheel loads it), flashjit opens a copy of that file from its cache
// folder, an instance no other library compiles in. Returns `held` itself when it cannot
// (the cache disabled or unusable), saying so under FLASHJIT_VERBOSE.
void* own_instance(void* held, const std::string& name) {
  const std::string held_path = loaded_file(held);
  if (cache_disabled()) {
    verbose("NVRTC: this process already holds {} ({}); the disk cache is disabled "
            "(FLASHJIT_DISABLE_CACHE), so flashjit compiles in that instance, shared",
            name, held_path);
    return held;
  }
  OwnLibrary own;
  try {
    own = open_own_library(held, cache_dir(), "nvrtc");
  } catch (const std::exception& error) {
    verbose("NVRTC: this process already holds {} ({}); no copy of its own ({}), so flashjit "
            "compiles in that instance, shared",
            name, held_path, error.what());
    return held;
  }
  verbose("NVRTC: opened {}, an instance of flashjit's own: a copy of {}, which this process "
          "already held ({})",
          own.path, held_path, own.copied ? "copied now" : "the copy reused");
  // The copy loads its builtins by soname when it first compiles, from a folder that holds
  // no builtins. Where none are loaded yet (torch preloads its wheel's), those beside the held
  // file are opened first, so that the soname finds the same release's and not whatever the
  // search path has.
  using Version = decltype(&::nvrtcVersion);
  int major = 0, minor = 0;
  if (auto version = reinterpret_cast<Version>(dlsym(own.handle, "nvrtcVersion"));
      version && version(&major, &minor) == NVRTC_SUCCESS) {
    const std::string builtins = fmt::format("libnvrtc-builtins.so.{}.{}", major, minor);
    const std::filesystem::path beside =
        std::filesystem::path(held_path).parent_path() / builtins;
    if (void* loaded = dlopen(builtins.c_str(), RTLD_NOW | RTLD_NOLOAD))
      dlclose(loaded);
    else if (std::filesystem::exists(beside))
      dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open, as NVRTC itself is
  }
  dlclose(held);  // the reference RTLD_NOLOAD took
  return own.handle;
}

// The library NVRTC's entry points come from: FLASHJIT_NVRTC_LIBRARY as it is (the user's
// choice, never copied); else an instance of our own where the process holds one of the
// default names; else the first of them that dlopen finds. Null with `tried` filled when none.
void* open_nvrtc(std::string& tried) {
  const bool forced = !nvrtc_library().empty();
  if (!forced) {
    for (const std::string& name : library_candidates()) {
      if (void* held = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD)) return own_instance(held, name);
    }
  }
  for (const std::string& name : library_candidates()) {
    if (void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      verbose("NVRTC: opened {} ({}{})", loaded_file(library), name,
              forced ? ", FLASHJIT_NVRTC_LIBRARY" : "");
      return library;
    }
    const char* why = dlerror();
    tried += fmt::format("{}{} ({})", tried.empty() ? "" : "; ", name, why ? why : "not found");
  }
  return nullptr;
}

NvrtcApi load_api() {
  NvrtcApi api;
  std::string tried;
  void* library = open_nvrtc(tried);
  if (!library) {
    api.failure = fmt::format("NVRTC could not be loaded: tried {}", tried);
    return api;
  }
  // The library stays open for the life of the process: programs may be compiled at any time.
  std::string missing;
  resolve(library, "nvrtcVersion", api.version, missing);
  resolve(library, "nvrtcGetErrorString", api.error_string, missing);
  resolve(library, "nvrtcCreateProgram", api.create_program, missing);
  resolve(library, "nvrtcDestroyProgram", api.destroy_program, missing);
  resolve(library, "nvrtcCompileProgram", api.compile_program, missing);
  resolve(library, "nvrtcGetProgramLogSize", api.program_log_size, missing);
  resolve(library, "nvrtcGetProgramLog", api.program_log, missing);
  resolve(library, "nvrtcGetCUBINSize", api.cubin_size, missing);
  resolve(library, "nvrtcGetCUBIN", api.cubin, missing);
  resolve(library, "nvrtcGetPTXSize", api.ptx_size, missing);
  resolve(library, "nvrtcGetPTX", api.ptx, missing);
  if (!missing.empty()) api.failure = fmt::format("NVRTC library unusable: {}", missing);
  return api;
}

const NvrtcApi& api_or_null() {
  static const NvrtcApi api = load_api();
  return api;
}

// The loaded API; throws Error(Compile) naming the libraries tried when there is none.
const NvrtcApi& api() {
  const NvrtcApi& loaded = api_or_null();
  if (!loaded.failure.empty()) {
    throw Error(ErrorKind::Compile,
                fmt::format("{}. A kernel that is not in a registered bundle needs NVRTC (CUDA "
                            "13 libnvrtc.so.13, or FLASHJIT_NVRTC_LIBRARY=<path>)",
                            loaded.failure));
  }
  return loaded;
}

void check(nvrtcResult result, const char* call) {
  if (result != NVRTC_SUCCESS) {
    throw Error(ErrorKind::Compile,
                fmt::format("{} failed: {}", call, api().error_string(result)));
  }
}

// Destroys the program on every path out of nvrtc_compile.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle) api().destroy_program(&handle);
  }
};

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  check(api().program_log_size(program, &size), "nvrtcGetProgramLogSize");
  std::string log(size, '\0');
  check(api().program_log(program, log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

// For each "<program_name>(N)" in the log: source line N with two lines of context.
std::string quoted_source_lines(const std::string& log, const std::string& program_name,
                                const std::string& source) {
  std::vector<std::string> lines;
  std::istringstream stream(source);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);

  const std::regex reference(std::regex_replace(program_name, std::regex(R"([.^$|()\[\]{}*+?\\])"),
                                                R"(\$&)") +
                             R"(\((\d+)\))");
  std::set<int> referenced;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), reference);
       it != std::sregex_iterator(); ++it) {
    referenced.insert(std::stoi((*it)[1].str()));
  }
  std::string out;
  for (int line_no : referenced) {
    if (line_no < 1 || line_no > static_cast<int>(lines.size())) continue;
    out += fmt::format("\n{}({}):\n", program_name, line_no);
    const int first = std::max(1, line_no - 2);
    const int last = std::min(static_cast<int>(lines.size()), line_no + 2);
    for (int n = first; n <= last; ++n) {
      out += fmt::format("{} {:5} | {}\n", n == line_no ? ">" : " ", n, lines[n - 1]);
    }
  }
  return out;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check(api().version(&major, &minor), "nvrtcVersion");
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> nvrtc_options(const std::string& target) {
  // --no-cache: NVRTC 12.9+ keeps its own cache of compiled programs (beside the driver's
  // compute cache), and a hit there skips ptxas and with it the -v report, which would make
  // every kernel read "0 registers, 0 bytes spilled". flashjit's disk cache serves repeats.
  return {"-std=c++17", "--gpu-architecture=" + target, "-default-device",
          "--ptxas-options=-v", "-lineinfo", "-DNDEBUG", "--no-cache"};
}

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program_name,
                          const std::string& target) {
  Program program;
  check(api().create_program(&program.handle, source.c_str(), program_name.c_str(), 0, nullptr,
                           nullptr),
        "nvrtcCreateProgram");
  const std::vector<std::string> options = nvrtc_options(target);
  std::vector<const char*> option_ptrs;
  for (const std::string& option : options) option_ptrs.push_back(option.c_str());

  ++g_invocations;
  const auto start = std::chrono::steady_clock::now();
  const nvrtcResult result = api().compile_program(program.handle,
                                                 static_cast<int>(option_ptrs.size()),
                                                 option_ptrs.data());
  NvrtcOutput out;
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.log = program_log(program.handle);
  if (result != NVRTC_SUCCESS) {
    throw Error(ErrorKind::Compile,
                fmt::format("NVRTC could not compile {} for {} ({}):\n{}{}", program_name, target,
                            api().error_string(result), out.log,
                            quoted_source_lines(out.log, program_name, source)));
  }

  if (out.log.find("Used ") == std::string::npos) {
    // Without the report nothing can vouch for the kernel's registers and spills.
    throw Error(ErrorKind::Compile,
                fmt::format("NVRTC compiled {} for {} but returned no ptxas resource report "
                            "(\"Used N registers\") in its log:\n{}",
                            program_name, target, out.log));
  }
  // ptxas reports Hopper code it had to degrade (setmaxnreg ignored, wgmma serialised or
  // fenced by the compiler: C7508, C7510-C7520) only as info lines. The kernels are ours, so
  // such a line is our bug: refuse the kernel rather than run it at a fraction of its speed.
  if (const auto at = out.log.find("(C75"); at != std::string::npos) {
    const auto begin = out.log.rfind('\n', at);
    const auto end = out.log.find('\n', at);
    throw Error(ErrorKind::Compile,
                fmt::format("ptxas degraded {} for {}: {}", program_name, target,
                            out.log.substr(begin == std::string::npos ? 0 : begin + 1,
                                           end == std::string::npos ? end : end - begin - 1)));
  }
  size_t size = 0;
  check(api().cubin_size(program.handle, &size), "nvrtcGetCUBINSize");
  out.cubin.resize(size);
  check(api().cubin(program.handle, out.cubin.data()), "nvrtcGetCUBIN");
  // An sm_XX target gives PTX as well (NVRTC >= 12): no second compile for compute_XX.
  check(api().ptx_size(program.handle, &size), "nvrtcGetPTXSize");
  out.ptx.resize(size);
  check(api().ptx(program.handle, out.ptx.data()), "nvrtcGetPTX");
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  return out;
}

uint64_t nvrtc_invocations() { return g_invocations.load(); }

bool nvrtc_available() { return api_or_null().failure.empty(); }

std::string nvrtc_unavailable_reason() { return api_or_null().failure; }

}  // namespace flashjit::rt
