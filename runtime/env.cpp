#include "runtime/env.h"

#include <cstdio>
#include <cstdlib>

namespace flashjit::rt {
namespace {

std::string get(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

bool flag(const char* name) {
  const std::string value = get(name);
  return !value.empty() && value != "0";
}

}  // namespace

std::string cache_dir() {
  if (std::string dir = get("FLASHJIT_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string xdg = get("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/flashjit";
  if (std::string home = get("HOME"); !home.empty()) return home + "/.cache/flashjit";
  return ".flashjit-cache";
}

bool cache_disabled() { return flag("FLASHJIT_DISABLE_CACHE"); }

std::string dump_dir() { return get("FLASHJIT_DUMP_DIR"); }

bool verbose_enabled() { return flag("FLASHJIT_VERBOSE"); }

std::string tune_db_path() { return get("FLASHJIT_TUNE_DB"); }

std::string nvrtc_library() { return get("FLASHJIT_NVRTC_LIBRARY"); }

void verbose_line(const std::string& message) {
  // One fprintf per line so lines from several compile threads do not interleave mid-line.
  std::fprintf(stderr, "[flashjit] %s\n", message.c_str());
}

}  // namespace flashjit::rt
