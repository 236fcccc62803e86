// Reading a file that someone else may have planted or damaged: never block on a FIFO, never
// read a directory or a device, never follow a link where the caller forbids it, never read
// more than a limit (a sparse multi-GB file is refused from its size, unread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashjit::rt {

struct ReadRules {
  uint64_t max_bytes = 0;
  bool follow_symlink = true;
  // Owned by the effective user and writable by nobody else: what a file whose contents are
  // trusted (a cached cubin runs on the GPU) must be.
  bool owned_by_me = false;
};

// The file's bytes; nullopt when nothing is at `path`. Throws Error(Io) "<what> <path>: why"
// when something is there that the rules refuse, or it cannot be read.
std::optional<std::string> read_bounded_file(const std::string& path, const ReadRules& rules,
                                             std::string_view what);

}  // namespace flashjit::rt
