// `flashjit cache info|clear`: the on-disk kernel cache of FLASHJIT_CACHE_DIR (DESIGN.md).
#include <memory>

#include <fmt/format.h>

#include "runtime/disk_cache.h"
#include "tools/command.h"

namespace flashjit::cli {

Command add_cache_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("cache", "Inspect or clear the on-disk kernel cache");
  app->require_subcommand(1);
  CLI::App* info = app->add_subcommand("info", "Print the cache folder, entries and bytes");
  CLI::App* clear = app->add_subcommand("clear", "Remove every cached kernel");
  return {app, [info, clear] {
            const rt::DiskCache cache = rt::DiskCache::from_env();
            if (info->parsed()) {
              const rt::CacheStats stats = cache.stats();
              fmt::print("dir: {}\nenabled: {}\nentries: {}\nbytes: {}\n", stats.dir,
                         stats.enabled ? "yes" : "no (FLASHJIT_DISABLE_CACHE)", stats.entries,
                         stats.bytes);
            } else if (clear->parsed()) {
              const int removed = cache.clear();
              fmt::print("removed {} cached kernel{} from {}\n", removed, removed == 1 ? "" : "s",
                         cache.dir());
            }
            return static_cast<int>(kOk);
          }};
}

}  // namespace flashjit::cli
