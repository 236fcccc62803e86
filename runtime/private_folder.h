// Folders that hold what flashjit loads and runs (the disk cache's kernels, NVRTC's copy):
// made 0700, and used only while no other user can write to them.
#pragma once

#include <string>

namespace flashjit::rt {

// mkdir -p with the last folder made 0700 (the ones above it as umask leaves them). Nothing
// happens when `dir` exists. Throws Error(Cache) when the last folder cannot be made.
void create_private_folder(const std::string& dir);

// As OpenSSH's StrictModes: a folder another user owns or can write to could hold a forged
// file, so it is not used at all. Throws Error(Cache) saying why (and what to do) when `dir`
// is not a folder, is owned by another user or is writable by group or others.
void check_private_folder(const std::string& dir);

}  // namespace flashjit::rt
