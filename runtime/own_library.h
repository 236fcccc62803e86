// An instance of a shared library that is this process's own, where the process already holds
// one: glibc maps a library once per file (a dlopen by path matches loaded objects by device
// and inode, one by soname their sonames), so a second instance comes from a second file, a
// copy. flashjit opens NVRTC this way in processes that hold it already (runtime/nvrtc_compiler.cpp).
#pragma once

#include <string>

namespace flashjit::rt {

// The file `handle` (from dlopen) was loaded from, as the dynamic linker names it ("" when it
// cannot tell).
std::string loaded_file(void* handle);

struct OwnLibrary {
  void* handle = nullptr;  // dlopen'ed RTLD_NOW | RTLD_LOCAL, never closed
  std::string path;        // the copy that was opened
  bool copied = false;     // written by this call (false: an earlier opening's copy, reused)
};

// Opens a copy of the file that `held` (a dlopen handle) was loaded from:
// `<root>/<folder>/<size>-<mtime>/<file name>` (size and mtime of the held file, in seconds),
// written once, atomically, and reused by every later opening while its size matches. `root`
// and the folders under it are created 0700 and used only while no other user can write to
// them (runtime/private_folder.h). Throws Error(Cache) for a folder it cannot make or use,
// Error(Io) when the file cannot be found, copied or opened.
OwnLibrary open_own_library(void* held, const std::string& root, const std::string& folder);

}  // namespace flashjit::rt
