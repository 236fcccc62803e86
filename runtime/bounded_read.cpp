#include "runtime/bounded_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "flashjit/flashjit.h"

namespace flashjit::rt {
namespace {

// Closes the descriptor on every way out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::optional<std::string> read_bounded_file(const std::string& path, const ReadRules& rules,
                                             std::string_view what) {
  auto refuse = [&](const std::string& why) {
    return Error(ErrorKind::Io, fmt::format("{} {}: {}", what, path, why));
  };
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | (rules.follow_symlink ? 0 : O_NOFOLLOW);
  const Fd fd(::open(path.c_str(), flags));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    if (errno == ELOOP && !rules.follow_symlink) throw refuse("is a symbolic link");
    throw refuse(fmt::format("cannot open: {}", std::strerror(errno)));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) throw refuse(fmt::format("fstat: {}", std::strerror(errno)));
  if (S_ISDIR(info.st_mode)) throw refuse("is a folder, not a file");
  if (!S_ISREG(info.st_mode)) throw refuse("is not a regular file (a FIFO, socket or device)");
  if (rules.owned_by_me && info.st_uid != ::geteuid())
    throw refuse(fmt::format("is owned by uid {}, not by this user (uid {})", info.st_uid,
                             ::geteuid()));
  if (rules.owned_by_me && (info.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    throw refuse(fmt::format("is writable by group or others (mode {:04o})",
                             info.st_mode & 07777));
  if (static_cast<uint64_t>(info.st_size) > rules.max_bytes)
    throw refuse(fmt::format("{} bytes, over the limit of {}", info.st_size, rules.max_bytes));

  // Read to the end, not to st_size, but never past the limit: the file may grow meanwhile.
  std::string bytes;
  bytes.reserve(static_cast<size_t>(info.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw refuse(fmt::format("read failed: {}", std::strerror(errno)));
    if (n == 0) break;
    bytes.append(chunk, static_cast<size_t>(n));
    if (bytes.size() > rules.max_bytes)
      throw refuse(fmt::format("grew past the limit of {} bytes while read", rules.max_bytes));
  }
  return bytes;
}

}  // namespace flashjit::rt
