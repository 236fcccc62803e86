// The environment flashjit reads, in one place (DESIGN.md "Environment"). Every other file
// asks these functions instead of calling getenv, so the variables are documented here only.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>

namespace flashjit::rt {

// FLASHJIT_CACHE_DIR, else $XDG_CACHE_HOME/flashjit, else $HOME/.cache/flashjit
// (else "./.flashjit-cache" when even HOME is unset, e.g. in a bare container).
std::string cache_dir();
// FLASHJIT_DISABLE_CACHE set to anything but "" or "0".
bool cache_disabled();
// FLASHJIT_DUMP_DIR: where rendered source, PTX, ptxas report and cubin are written ("" = off).
std::string dump_dir();
// FLASHJIT_VERBOSE set to anything but "" or "0".
bool verbose_enabled();
// FLASHJIT_TUNE_DB: path of the tuning database ("" = not set).
std::string tune_db_path();
// FLASHJIT_NVRTC_LIBRARY: the one NVRTC library to dlopen, a path or a soname ("" = the
// default names), opened as it is: never copied, so a file the process already holds gives
// that instance (runtime/nvrtc_compiler.h). A path that does not exist checks that an
// application runs without NVRTC.
std::string nvrtc_library();

// Prints "[flashjit] <message>" to stderr when FLASHJIT_VERBOSE is set.
void verbose_line(const std::string& message);

template <typename... Args>
void verbose(fmt::format_string<Args...> format, Args&&... args) {
  if (verbose_enabled()) verbose_line(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace flashjit::rt
