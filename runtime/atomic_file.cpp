#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "flashjit/flashjit.h"

namespace flashjit::rt {
namespace {

const char* file_type(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device node";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Error write_error(const std::string& path, std::string_view what, const std::string& why) {
  return Error(ErrorKind::Io, fmt::format("cannot write {} {}: {}", what, path, why));
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Makes the rename itself durable; a failure here loses nothing already written.
void fsync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void check_replaceable(const std::string& path, std::string_view what) {
  // rename() replaces a symlink itself, never its target, so a link planted between this check
  // and the rename cannot redirect the write; the check is there so that `-o /dev/full` or a
  // link the user made is reported instead of silently replaced.
  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0) {
    if (!S_ISREG(existing.st_mode))
      throw write_error(path, what, fmt::format("it is {}; only a regular file is replaced",
                                                file_type(existing.st_mode)));
  } else if (errno != ENOENT) {
    throw write_error(path, what, std::strerror(errno));
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes, mode_t mode,
                           std::string_view what) {
  auto fail = [&](const std::string& why) { return write_error(path, what, why); };
  check_replaceable(path, what);
  std::string temp = fmt::format("{}{}XXXXXX", path, kTempSuffix);
  // mkostemp creates the file with O_EXCL: it never opens something planted at that name.
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) throw fail(fmt::format("cannot create a temporary file: {}", std::strerror(errno)));
  bool written = write_all(fd, bytes) && ::fchmod(fd, mode) == 0 && ::fsync(fd) == 0;
  int error_number = errno;
  if (::close(fd) != 0 && written) {
    written = false;
    error_number = errno;
  }
  if (!written) {
    ::unlink(temp.c_str());
    throw fail(fmt::format("writing {} failed: {}", temp, std::strerror(error_number)));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(temp.c_str());
    throw fail(fmt::format("rename from {} failed: {}", temp, std::strerror(rename_error)));
  }
  const std::string folder = std::filesystem::path(path).parent_path().string();
  fsync_folder(folder.empty() ? "." : folder);
}

}  // namespace flashjit::rt
