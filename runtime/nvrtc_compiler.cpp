#include "runtime/nvrtc_compiler.h"

#include <nvrtc.h>

#include <atomic>
#include <chrono>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "flashjit/flashjit.h"

namespace flashjit::rt {
namespace {

std::atomic<uint64_t> g_invocations{0};

void check(nvrtcResult result, const char* call) {
  if (result != NVRTC_SUCCESS) {
    throw Error(ErrorKind::Compile, fmt::format("{} failed: {}", call, nvrtcGetErrorString(result)));
  }
}

// Destroys the program on every path out of nvrtc_compile.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle) nvrtcDestroyProgram(&handle);
  }
};

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  check(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize");
  std::string log(size, '\0');
  check(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog");
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
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> nvrtc_options(const std::string& target) {
  return {"-std=c++17", "--gpu-architecture=" + target, "-default-device",
          "--ptxas-options=-v", "-lineinfo", "-DNDEBUG"};
}

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program_name,
                          const std::string& target) {
  Program program;
  check(nvrtcCreateProgram(&program.handle, source.c_str(), program_name.c_str(), 0, nullptr,
                           nullptr),
        "nvrtcCreateProgram");
  const std::vector<std::string> options = nvrtc_options(target);
  std::vector<const char*> option_ptrs;
  for (const std::string& option : options) option_ptrs.push_back(option.c_str());

  ++g_invocations;
  const auto start = std::chrono::steady_clock::now();
  const nvrtcResult result = nvrtcCompileProgram(program.handle,
                                                 static_cast<int>(option_ptrs.size()),
                                                 option_ptrs.data());
  NvrtcOutput out;
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.log = program_log(program.handle);
  if (result != NVRTC_SUCCESS) {
    throw Error(ErrorKind::Compile,
                fmt::format("NVRTC could not compile {} for {} ({}):\n{}{}", program_name, target,
                            nvrtcGetErrorString(result), out.log,
                            quoted_source_lines(out.log, program_name, source)));
  }

  size_t size = 0;
  check(nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize");
  out.cubin.resize(size);
  check(nvrtcGetCUBIN(program.handle, out.cubin.data()), "nvrtcGetCUBIN");
  // An sm_XX target gives PTX as well (NVRTC >= 12): no second compile for compute_XX.
  check(nvrtcGetPTXSize(program.handle, &size), "nvrtcGetPTXSize");
  out.ptx.resize(size);
  check(nvrtcGetPTX(program.handle, out.ptx.data()), "nvrtcGetPTX");
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  return out;
}

uint64_t nvrtc_invocations() { return g_invocations.load(); }

}  // namespace flashjit::rt
