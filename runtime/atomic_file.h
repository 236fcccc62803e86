// The one way flashjit replaces a file: write a unique temporary in the target's folder
// (mkstemp), fsync it, rename it over the target. Readers see the old file or the new one,
// never half of either, and two writers of one path never share a temporary.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace flashjit::rt {

// Suffix of the temporaries: "<target>.tmp-XXXXXX" (so a folder's owner can find and remove
// those a killed writer left behind).
inline constexpr std::string_view kTempSuffix = ".tmp-";

// Throws Error(Io) when `path` holds anything but a regular file; nothing there is fine. Lets
// a command refuse its output before the work that produces it.
void check_replaceable(const std::string& path, std::string_view what);

// Writes `bytes` to `path` atomically, with permission bits `mode`. Refuses (Error(Io)) to
// replace anything but a regular file: a symlink, a device node, a FIFO or a folder at `path`
// stays as it is. `what` names the file in messages ("bundle", "tune DB", "cache entry").
// The folder must exist.
void write_file_atomically(const std::string& path, std::string_view bytes, mode_t mode,
                           std::string_view what);

}  // namespace flashjit::rt
