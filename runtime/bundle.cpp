#include "runtime/bundle.h"

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/bounded_read.h"
#include "runtime/env.h"

namespace flashjit::rt {
namespace {

using json = nlohmann::json;

std::string tiles_text(const Tiles& t) {
  return fmt::format("m{}n{}w{}s{}", t.block_m, t.block_n, t.warps, t.stages);
}

json kernel_json(const Artifact& k) {
  return {{"spec_name", k.spec_name},
          {"spec_yaml", k.spec_yaml},
          {"target", k.target},
          {"align_bytes", k.align_bytes},
          {"tiles",
           {{"block_m", k.tiles.block_m},
            {"block_n", k.tiles.block_n},
            {"warps", k.tiles.warps},
            {"stages", k.tiles.stages}}},
          {"kernel_name", k.kernel_name},
          {"source_sha256", k.source_sha256},
          {"cache_key", k.cache_key},
          {"cubin_bytes", k.cubin.size()}};
}

Error corrupt(const std::string& name, const std::string& why) {
  return Error(ErrorKind::Io, fmt::format("bundle {} is corrupt: {}", name, why));
}

}  // namespace

Bundle read_bundle(const std::string& bytes, const std::string& name) {
  try {
    return decode_bundle(bytes);
  } catch (const Error& error) {
    if (error.kind() == ErrorKind::Usage)
      throw Error(ErrorKind::Usage,
                  fmt::format("bundle {} has {}: rebuild it with this flashjit's ({}) "
                              "`flashjit build`",
                              name, error.what(), version()));
    throw corrupt(name, error.what());
  }
}

json bundle_manifest(const Bundle& bundle) {
  json kernels = json::array();
  for (const Artifact& k : bundle.kernels) kernels.push_back(kernel_json(k));
  return {{"format_version", kArtifactFormatVersion},
          {"generator_version", bundle.generator_version},
          {"nvrtc_version", bundle.nvrtc_version},
          {"kernels", std::move(kernels)}};
}

BundleRegistry& BundleRegistry::global() {
  static BundleRegistry registry;
  return registry;
}

void BundleRegistry::add(const std::string& bytes, const std::string& name) {
  try {
    auto bundle = std::make_shared<Bundle>(read_bundle(bytes, name));
    if (bundle->generator_version != version()) {
      throw Error(ErrorKind::Usage,
                  fmt::format("bundle {} was built by flashjit generator {}, this is {}: its "
                              "kernels would not match this generator's code; rebuild it with "
                              "`flashjit build`",
                              name, bundle->generator_version, version()));
    }
    verbose("registered bundle {}: {} kernels (generator {}, NVRTC {})", name,
            bundle->kernels.size(), bundle->generator_version, bundle->nvrtc_version);
    std::lock_guard<std::mutex> lock(mutex_);
    bundles_.push_back({name, std::move(bundle)});
  } catch (const Error& error) {
    std::lock_guard<std::mutex> lock(mutex_);
    refusals_.push_back(fmt::format("refused: {}", error.what()));
    throw;
  }
}

bool BundleRegistry::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bundles_.empty();
}

BundleRegistry::Match BundleRegistry::find(const std::string& target,
                                           const std::string& kernel_name,
                                           const std::string& spec_name,
                                           const std::string& source_sha256) const {
  std::lock_guard<std::mutex> lock(mutex_);
  // What the bundles hold instead, collected on the way so that a miss says what was close.
  std::vector<std::string> near;
  for (const Registered& registered : bundles_) {
    std::set<std::string> other_targets;
    std::set<std::string> other_variants;
    for (const Artifact& k : registered.bundle->kernels) {
      if (k.kernel_name == kernel_name && k.target == target) {
        if (k.source_sha256 == source_sha256) {
          // Aliasing pointer: the kernel lives as long as its bundle.
          return {std::shared_ptr<const Artifact>(registered.bundle, &k), registered.name,
                  ""};
        }
        near.push_back(fmt::format(
            "bundle {} holds {} for {} built from another source (another spec or a modified "
            "generator): refused",
            registered.name, kernel_name, target));
      } else if (k.kernel_name == kernel_name) {
        other_targets.insert(k.target);
      } else if (k.spec_name == spec_name && k.target == target) {
        other_variants.insert(fmt::format("{} a{}", tiles_text(k.tiles), k.align_bytes));
      }
    }
    if (!other_targets.empty()) {
      near.push_back(fmt::format("bundle {} holds {} for {} only, not {} (arch mismatch)",
                                 registered.name, kernel_name,
                                 fmt::join(other_targets, ", "), target));
    }
    if (!other_variants.empty()) {
      near.push_back(fmt::format(
          "bundle {} holds spec {} on {} only as {} (other tiles or alignment than this call "
          "needs)",
          registered.name, spec_name, target, fmt::join(other_variants, ", ")));
    }
  }
  std::string why;
  if (bundles_.empty()) why = "no bundle is registered";
  for (const std::string& line : near) why += (why.empty() ? "" : "; ") + line;
  for (const std::string& line : refusals_) why += (why.empty() ? "" : "; ") + line;
  if (why.empty()) why = fmt::format("no registered bundle holds spec {} for {}", spec_name, target);
  return {nullptr, "", why};
}

}  // namespace flashjit::rt

namespace flashjit {

void register_bundle(const void* data, size_t size, const std::string& name) {
  rt::BundleRegistry::global().add(std::string(static_cast<const char*>(data), size), name);
}

void register_bundle_file(const std::string& path) {
  const std::optional<std::string> bytes =
      rt::read_bounded_file(path, {rt::kMaxBundleBytes, true, false}, "bundle");
  if (!bytes) throw Error(ErrorKind::Io, fmt::format("bundle {}: no such file", path));
  rt::BundleRegistry::global().add(*bytes, path);
}

}  // namespace flashjit
