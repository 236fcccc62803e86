// `flashjit bench [compare.py options]`: the benchmark against PyTorch's attention backends.
// The harness is bench/compare.py of the source tree this program was built from (it needs
// Python with PyTorch on the GPU machine); this command runs it with the library built beside
// this program and the tree's git commit, and exits with its status (0 passed, 1 a flashjit
// failure or error bound exceeded, 2 setup problem, 3 no GPU).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/command.h"

namespace flashjit::cli {
namespace {

// `git rev-parse --short HEAD` of the source tree, "unknown" when it is not a git checkout.
std::string source_commit() {
  const std::string command =
      fmt::format("git -C '{}' rev-parse --short HEAD 2>/dev/null", FLASHJIT_SOURCE_DIR);
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[64];
    while (std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.empty() ? "unknown" : out;
}

void require_file(const std::string& path, const char* what) {
  if (!std::filesystem::exists(path))
    throw Error(ErrorKind::Io,
                fmt::format("{} not found at {}: `flashjit bench` runs the benchmark of the "
                            "flashjit source tree it was built from (scripts/bench.sh there)",
                            what, path));
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand(
      "bench",
      "Benchmark flashjit against PyTorch's scaled_dot_product_attention backends on the GPU "
      "(bench/compare.py; options after the command go to it, e.g. --quick, --dims 64,128, "
      "--seqlens 4096, --out DIR; see bench/README.md)");
  app->allow_extras();
  app->prefix_command();  // everything after `bench` is compare.py's
  return {app, [app]() -> int {
            const std::string script = std::string(FLASHJIT_SOURCE_DIR) + "/bench/compare.py";
            require_file(script, "bench/compare.py");
            require_file(FLASHJIT_C_LIBRARY, "libflashjit_c.so");
            std::vector<std::string> args = {"python3", script, "--lib", FLASHJIT_C_LIBRARY,
                                             "--commit", source_commit()};
            for (const std::string& extra : app->remaining()) args.push_back(extra);
            std::vector<char*> argv;
            for (std::string& arg : args) argv.push_back(arg.data());
            argv.push_back(nullptr);
            std::fflush(stdout);
            execvp("python3", argv.data());  // returns only on failure
            throw Error(ErrorKind::Io, fmt::format("cannot run python3 ({}): the benchmark needs "
                                                   "Python 3 with PyTorch",
                                                   std::strerror(errno)));
          }};
}

}  // namespace flashjit::cli
