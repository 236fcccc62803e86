#include "runtime/own_library.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "flashjit/flashjit.h"
#include "runtime/atomic_file.h"
#include "runtime/private_folder.h"

namespace flashjit::rt {
namespace fs = std::filesystem;
namespace {

Error io_error(const std::string& message) { return Error(ErrorKind::Io, message); }

// The whole file, which must hold `size` bytes (it is not being replaced under us).
std::string read_library(const std::string& path, off_t size) {
  std::string bytes(static_cast<size_t>(size), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(bytes.data(), size);
  if (!in || in.gcount() != size || in.peek() != std::ifstream::traits_type::eof())
    throw io_error(fmt::format("cannot read {} ({} of {} bytes)", path, in.gcount(), size));
  return bytes;
}

}  // namespace

std::string loaded_file(void* handle) {
  struct link_map* map = nullptr;
  if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name) return "";
  return map->l_name;
}

OwnLibrary open_own_library(void* held, const std::string& root, const std::string& folder) {
  const std::string source = loaded_file(held);
  if (source.empty()) throw io_error("the dynamic linker does not say which file it loaded");
  struct stat info {};
  if (::stat(source.c_str(), &info) != 0)
    throw io_error(fmt::format("{}: {}", source, std::strerror(errno)));
  if (!S_ISREG(info.st_mode)) throw io_error(fmt::format("{}: not a regular file", source));
  std::error_code error;
  const fs::path real = fs::canonical(source, error);
  const std::string name = (error ? fs::path(source) : real).filename().string();

  // Each level checked, the root included: a folder another user could write to could be
  // made to hold a library of theirs.
  const fs::path dir = fs::path(root) / folder / fmt::format("{}-{}", info.st_size, info.st_mtime);
  for (const fs::path& level : {fs::path(root), fs::path(root) / folder, dir}) {
    create_private_folder(level.string());
    check_private_folder(level.string());
  }
  OwnLibrary own;
  own.path = (dir / name).string();
  struct stat copy {};
  if (::lstat(own.path.c_str(), &copy) != 0 || !S_ISREG(copy.st_mode) ||
      copy.st_size != info.st_size) {
    // Concurrent openings each rename a complete copy into place (identical bytes); one that
    // has opened the file it replaced keeps that file's pages.
    write_file_atomically(own.path, read_library(source, info.st_size), 0700, "library copy");
    own.copied = true;
  }
  own.handle = dlopen(own.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!own.handle) {
    const char* why = dlerror();
    throw io_error(fmt::format("cannot open {}: {}", own.path, why ? why : "dlopen failed"));
  }
  return own;
}

}  // namespace flashjit::rt
