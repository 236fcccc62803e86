// Bundle file layout:
//
//   "FJBUNDLE"        8-byte magic
//   64 bytes          lowercase hex SHA-256 of the body
//   body              CBOR (nlohmann::json::to_cbor) of
//                     { format_version, generator_version, nvrtc_version,
//                       kernels: [ { spec_name, spec_yaml, target, align_bytes,
//                                    tiles: {block_m, block_n, warps, stages},
//                                    kernel_name, source_sha256, cache_key, ptxas_log,
//                                    cubin (CBOR byte string) } ] }
//
// CBOR rather than JSON because cubins are binary; the checksum comes before the body so that
// nothing in a corrupt body is parsed at all.
#include "runtime/bundle.h"


#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/env.h"

namespace flashjit::rt {
namespace {

using json = nlohmann::json;

constexpr char kMagic[] = "FJBUNDLE";
constexpr size_t kMagicBytes = sizeof(kMagic) - 1;
constexpr size_t kChecksumChars = 64;

std::string tiles_text(const Tiles& t) {
  return fmt::format("m{}n{}w{}s{}", t.block_m, t.block_n, t.warps, t.stages);
}

json kernel_json(const BundleKernel& k) {
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
          {"ptxas_log", k.ptxas_log}};
}

// Reads one kernel; nlohmann's at()/get() throw on a missing field or a wrong type, which
// read_bundle turns into Error(Io) naming the bundle and the kernel's index.
BundleKernel kernel_from_json(const json& j) {
  BundleKernel k;
  k.spec_name = j.at("spec_name").get<std::string>();
  k.spec_yaml = j.at("spec_yaml").get<std::string>();
  k.target = j.at("target").get<std::string>();
  k.align_bytes = j.at("align_bytes").get<int>();
  const json& tiles = j.at("tiles");
  k.tiles = {tiles.at("block_m").get<int>(), tiles.at("block_n").get<int>(),
             tiles.at("warps").get<int>(), tiles.at("stages").get<int>()};
  k.kernel_name = j.at("kernel_name").get<std::string>();
  k.source_sha256 = j.at("source_sha256").get<std::string>();
  k.cache_key = j.at("cache_key").get<std::string>();
  k.ptxas_log = j.at("ptxas_log").get<std::string>();
  const auto& cubin = j.at("cubin").get_binary();
  k.cubin.assign(cubin.begin(), cubin.end());
  return k;
}

Error corrupt(const std::string& name, const std::string& why) {
  return Error(ErrorKind::Io, fmt::format("bundle {} is corrupt: {}", name, why));
}

}  // namespace

std::string write_bundle(const Bundle& bundle) {
  json kernels = json::array();
  for (const BundleKernel& k : bundle.kernels) {
    json entry = kernel_json(k);
    entry["cubin"] = json::binary(std::vector<std::uint8_t>(k.cubin.begin(), k.cubin.end()));
    kernels.push_back(std::move(entry));
  }
  const json document = {{"format_version", kBundleFormatVersion},
                         {"generator_version", bundle.generator_version},
                         {"nvrtc_version", bundle.nvrtc_version},
                         {"kernels", std::move(kernels)}};
  const std::vector<std::uint8_t> cbor = json::to_cbor(document);
  const std::string body(cbor.begin(), cbor.end());
  return std::string(kMagic, kMagicBytes) + sha256_hex(body) + body;
}

Bundle read_bundle(const std::string& bytes, const std::string& name) {
  if (bytes.size() < kMagicBytes + kChecksumChars ||
      bytes.compare(0, kMagicBytes, kMagic) != 0) {
    throw corrupt(name, "not a flashjit bundle (no FJBUNDLE header)");
  }
  const std::string checksum = bytes.substr(kMagicBytes, kChecksumChars);
  const std::string body = bytes.substr(kMagicBytes + kChecksumChars);
  if (sha256_hex(body) != checksum) {
    throw corrupt(name, "SHA-256 checksum mismatch (truncated or modified file)");
  }
  json document;
  try {
    document = json::from_cbor(body);
  } catch (const json::exception& error) {
    throw corrupt(name, error.what());
  }
  Bundle bundle;
  try {
    const int format = document.at("format_version").get<int>();
    if (format != kBundleFormatVersion) {
      throw Error(ErrorKind::Usage,
                  fmt::format("bundle {} has format version {}; this flashjit ({}) reads version "
                              "{}: rebuild it with this flashjit's `flashjit build`",
                              name, format, version(), kBundleFormatVersion));
    }
    bundle.generator_version = document.at("generator_version").get<std::string>();
    bundle.nvrtc_version = document.at("nvrtc_version").get<std::string>();
    const json& kernels = document.at("kernels");
    for (size_t i = 0; i < kernels.size(); ++i) {
      try {
        bundle.kernels.push_back(kernel_from_json(kernels.at(i)));
      } catch (const json::exception& error) {
        throw corrupt(name, fmt::format("kernel #{}: {}", i, error.what()));
      }
    }
  } catch (const json::exception& error) {
    throw corrupt(name, fmt::format("manifest: {}", error.what()));
  }
  return bundle;
}

json bundle_manifest(const Bundle& bundle) {
  json kernels = json::array();
  for (const BundleKernel& k : bundle.kernels) {
    json entry = kernel_json(k);
    entry.erase("ptxas_log");
    entry["cubin_bytes"] = k.cubin.size();
    kernels.push_back(std::move(entry));
  }
  return {{"format_version", kBundleFormatVersion},
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
    for (const BundleKernel& k : registered.bundle->kernels) {
      if (k.kernel_name == kernel_name && k.target == target) {
        if (k.source_sha256 == source_sha256) {
          // Aliasing pointer: the kernel lives as long as its bundle.
          return {std::shared_ptr<const BundleKernel>(registered.bundle, &k), registered.name,
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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::Io, fmt::format("cannot read bundle {}", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  rt::BundleRegistry::global().add(bytes, path);
}

}  // namespace flashjit
