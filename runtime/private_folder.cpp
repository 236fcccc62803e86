#include "runtime/private_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "flashjit/flashjit.h"

namespace flashjit::rt {
namespace fs = std::filesystem;

void create_private_folder(const std::string& dir) {
  if (fs::exists(dir)) return;
  const fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(ErrorKind::Cache,
                fmt::format("cannot create cache folder {}: {}", dir, std::strerror(errno)));
}

void check_private_folder(const std::string& dir) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0)
    throw Error(ErrorKind::Cache,
                fmt::format("cache folder {}: {}", dir, std::strerror(errno)));
  std::string why;
  if (!S_ISDIR(info.st_mode))
    why = "is not a folder";
  else if (info.st_uid != ::geteuid())
    why = fmt::format("is owned by uid {}, not by this user (uid {})", info.st_uid, ::geteuid());
  else if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    why = fmt::format("is writable by group or others (mode {:04o})", info.st_mode & 07777);
  if (!why.empty())
    throw Error(ErrorKind::Cache,
                fmt::format("cache folder {} {}: flashjit does not load kernels from a folder "
                            "another user could write to. Use a folder of your own "
                            "(FLASHJIT_CACHE_DIR), `chmod go-w` it, or set "
                            "FLASHJIT_DISABLE_CACHE=1",
                            dir, why));
}

}  // namespace flashjit::rt
