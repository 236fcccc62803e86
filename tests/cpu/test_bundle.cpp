// Kernel bundles: the file round trip, the manifest, refusing corrupt and mismatched bundles,
// the runtime's lookup order (bundle before disk cache and NVRTC), require_prebuilt, and
// `flashjit build` / NVRTC hidden through the CLI.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flashjit/flashjit.h"
#include "generator/emit.h"
#include "generator/plan.h"
#include "runtime/bundle.h"
#include "runtime/kernel_compiler.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/operation.h"
#include "runtime/tune_db.h"
#include "runtime/tune_key.h"
#include "runtime_test_support.h"

using flashjit::Error;
using flashjit::ErrorKind;
using flashjit::test::TempDir;
using namespace flashjit::rt;

namespace {

flashjit::Spec hd100() {
  flashjit::Spec spec;
  spec.name = "hd100";
  spec.head_dim_qk = spec.head_dim_v = 100;
  return spec;
}

// A bundled kernel for `plan` holding a fake cubin: the lookup never looks inside it.
Artifact fake_kernel(const flashjit::gen::Plan& plan) {
  Artifact k;
  k.spec_name = plan.spec.name;
  k.spec_yaml = plan.spec.to_yaml();
  k.target = plan.target;
  k.align_bytes = plan.call.align_bytes;
  k.tiles = plan.tiles;
  k.kernel_name = plan.kernel_name;
  k.source_sha256 = sha256_hex(flashjit::gen::emit_source(plan));
  k.cache_key = std::string(64, '0');  // not used by the lookup
  k.cubin = flashjit::test::fake_cubin(std::string("fake\0cubin", 10));
  k.ptxas_log = "ptxas info    : 0 bytes stack frame";
  return k;
}

Bundle one_kernel_bundle(const flashjit::gen::Plan& plan) {
  return {flashjit::version(), "13.0", {fake_kernel(plan)}};
}

std::string message_of(const std::function<void()>& action, ErrorKind expected) {
  try {
    action();
  } catch (const Error& error) {
    CHECK(error.kind() == expected);
    return error.what();
  }
  FAIL("no error thrown");
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs the CLI with `env` prefixed, stdout+stderr into `out`; returns the exit status.
int run_cli(const std::string& env, const std::string& args, std::string& out) {
  TempDir dir;
  const std::string log = (dir.path() / "log").string();
  const std::string command =
      env + " " + FLASHJIT_CLI_PATH + " " + args + " > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  out = read_file(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("bundle: write then read gives back every field and the cubin bytes") {
  const auto plan = flashjit::gen::make_plan(hd100(), "sm_90a", {.align_bytes = 8});
  Bundle bundle = one_kernel_bundle(plan);
  bundle.kernels.push_back(fake_kernel(flashjit::gen::make_plan(hd100(), "sm_80")));
  const Bundle back = read_bundle(encode_bundle(bundle), "round-trip");
  CHECK(back.generator_version == flashjit::version());
  CHECK(back.nvrtc_version == "13.0");
  REQUIRE(back.kernels.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const Artifact& a = bundle.kernels[i];
    const Artifact& b = back.kernels[i];
    CHECK(b.spec_name == a.spec_name);
    CHECK(b.spec_yaml == a.spec_yaml);
    CHECK(b.target == a.target);
    CHECK(b.align_bytes == a.align_bytes);
    CHECK(b.tiles == a.tiles);
    CHECK(b.kernel_name == a.kernel_name);
    CHECK(b.source_sha256 == a.source_sha256);
    CHECK(b.cache_key == a.cache_key);
    CHECK(b.cubin == a.cubin);  // binary, with NUL bytes
    CHECK(b.ptxas_log == a.ptxas_log);
  }
}

TEST_CASE("bundle: the manifest names spec, target, tiles, alignment and versions, not cubins") {
  const auto plan = flashjit::gen::make_plan(hd100(), "sm_90a", {.align_bytes = 8});
  const nlohmann::json manifest = bundle_manifest(one_kernel_bundle(plan));
  CHECK(manifest["format_version"] == kArtifactFormatVersion);
  CHECK(manifest["generator_version"] == flashjit::version());
  CHECK(manifest["nvrtc_version"] == "13.0");
  const nlohmann::json& k = manifest["kernels"].at(0);
  CHECK(k["spec_name"] == "hd100");
  CHECK(k["target"] == "sm_90a");
  CHECK(k["align_bytes"] == 8);
  CHECK(k["kernel_name"] == plan.kernel_name);
  CHECK(k["tiles"]["block_m"] == plan.tiles.block_m);
  CHECK(k["cubin_bytes"] == 74);
  CHECK_FALSE(k.contains("cubin"));
}

TEST_CASE("bundle: a corrupt, truncated or foreign file is refused with Error(Io)") {
  const std::string bytes =
      encode_bundle(one_kernel_bundle(flashjit::gen::make_plan(hd100(), "sm_80")));
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x40;
  CHECK(message_of([&] { read_bundle(flipped, "flipped.fjb"); }, ErrorKind::Io)
            .find("flipped.fjb is corrupt: checksum mismatch") != std::string::npos);
  CHECK(message_of([&] { read_bundle(bytes.substr(0, bytes.size() - 5), "cut.fjb"); },
                   ErrorKind::Io)
            .find("truncated") != std::string::npos);
  CHECK(message_of([&] { read_bundle("name: hd100\n", "spec.yaml"); }, ErrorKind::Io)
            .find("no FJBUNDLE header") != std::string::npos);
}

TEST_CASE("bundle: another format version is refused, naming both versions") {
  const std::string bytes =
      encode_bundle(one_kernel_bundle(flashjit::gen::make_plan(hd100(), "sm_80")));
  std::string file = bytes;
  file[8] = static_cast<char>(kArtifactFormatVersion + 1);  // the u32 after the magic
  const std::string message = message_of([&] { read_bundle(file, "future.fjb"); },
                                         ErrorKind::Usage);
  CHECK(message.find(fmt::format("format version {} (this flashjit reads {})",
                                 kArtifactFormatVersion + 1, kArtifactFormatVersion)) !=
        std::string::npos);
}

TEST_CASE("bundle registry: another generator version is refused, and a later miss says so") {
  const auto plan = flashjit::gen::make_plan(hd100(), "sm_90a", {.align_bytes = 8});
  Bundle old = one_kernel_bundle(plan);
  old.generator_version = "0.0.1-old";
  BundleRegistry registry;
  const std::string message =
      message_of([&] { registry.add(encode_bundle(old), "old.fjb"); }, ErrorKind::Usage);
  CHECK(message.find("old.fjb was built by flashjit generator 0.0.1-old") != std::string::npos);
  CHECK(registry.empty());
  const auto match = registry.find(plan.target, plan.kernel_name, plan.spec.name,
                                   fake_kernel(plan).source_sha256);
  CHECK(match.kernel == nullptr);
  CHECK(match.why_not.find("refused: bundle old.fjb") != std::string::npos);
}

TEST_CASE("bundle registry: matches target, kernel and source; names arch, source and variant "
          "mismatches") {
  const auto plan = flashjit::gen::make_plan(hd100(), "sm_80", {.align_bytes = 8});
  BundleRegistry registry;
  registry.add(encode_bundle(one_kernel_bundle(plan)), "app.fjb");
  const std::string sha = fake_kernel(plan).source_sha256;

  const auto hit = registry.find("sm_80", plan.kernel_name, "hd100", sha);
  REQUIRE(hit.kernel != nullptr);
  CHECK(hit.bundle_name == "app.fjb");
  CHECK(hit.kernel->cubin == fake_kernel(plan).cubin);

  const auto other_arch = registry.find("sm_90a", plan.kernel_name, "hd100", sha);
  CHECK(other_arch.kernel == nullptr);
  CHECK(other_arch.why_not.find("for sm_80 only, not sm_90a (arch mismatch)") !=
        std::string::npos);

  const auto other_source = registry.find("sm_80", plan.kernel_name, "hd100", sha256_hex("x"));
  CHECK(other_source.kernel == nullptr);
  CHECK(other_source.why_not.find("built from another source") != std::string::npos);

  const auto a4 = flashjit::gen::make_plan(hd100(), "sm_80", {.align_bytes = 4});
  const auto other_variant = registry.find("sm_80", a4.kernel_name, "hd100", sha);
  CHECK(other_variant.kernel == nullptr);
  CHECK(other_variant.why_not.find("holds spec hd100 on sm_80 only as") != std::string::npos);
  CHECK(other_variant.why_not.find(" a8") != std::string::npos);
}

TEST_CASE("kernel compiler: a bundled kernel is served without NVRTC or the disk cache; "
          "require_prebuilt refuses the rest") {
  TempDir cache;
  const auto plan = flashjit::gen::make_plan(hd100(), "sm_90a", {.align_bytes = 8});
  BundleRegistry registry;
  registry.add(encode_bundle(one_kernel_bundle(plan)), "app.fjb");
  KernelCompiler compiler(DiskCache(cache.str(), true), registry);
  compiler.set_require_prebuilt(true);

  const auto before = nvrtc_invocations();
  const auto kernel = compiler.compile(plan);
  CHECK(nvrtc_invocations() == before);
  CHECK(kernel->bundle == "app.fjb");
  CHECK(kernel->artifacts.cubin == fake_kernel(plan).cubin);
  CHECK(kernel->report.cache_hit);
  CHECK(DiskCache(cache.str(), true).stats().entries == 0);  // nothing written to the cache

  const auto a2 = flashjit::gen::make_plan(hd100(), "sm_90a", {.align_bytes = 2});
  const std::string message = message_of([&] { compiler.compile(a2); }, ErrorKind::Compile);
  CHECK(message.find("require_prebuilt forbids compiling it") != std::string::npos);
  CHECK(message.find(a2.kernel_name) != std::string::npos);
  CHECK(nvrtc_invocations() == before);
}

TEST_CASE("flashjit build: a bundle with the 16-byte and natural variants, its manifest, and "
          "a compile that cannot find NVRTC") {
  TempDir dir;
  const std::string bundle_path = (dir.path() / "hd100.fjb").string();
  const std::string spec = std::string(FLASHJIT_SOURCE_DIR) + "/examples/embed/hd100.yaml";
  std::string out;
  REQUIRE(run_cli("FLASHJIT_DISABLE_CACHE=1",
                  "build " + spec + " --arch sm_80 -o " + bundle_path, out) == 0);
  CHECK(out.find("2 kernels") != std::string::npos);
  // Written through a unique temporary, renamed: nothing else is left in the folder.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()),
                      std::filesystem::directory_iterator()) == 1);
  const Bundle bundle = read_bundle(read_file(bundle_path), bundle_path);
  REQUIRE(bundle.kernels.size() == 2);
  CHECK(bundle.kernels[0].align_bytes == 16);
  CHECK(bundle.kernels[1].align_bytes == 8);  // head dim 100 in bf16: 200-byte rows
  for (const Artifact& k : bundle.kernels) {
    CHECK(k.target == "sm_80");
    CHECK(k.cubin.substr(0, 4) == "\x7f" "ELF");
    const auto plan = flashjit::gen::make_plan(hd100(), "sm_80", {.align_bytes = k.align_bytes});
    CHECK(k.kernel_name == plan.kernel_name);
    CHECK(k.source_sha256 == sha256_hex(flashjit::gen::emit_source(plan)));
  }

  CHECK(run_cli("FLASHJIT_DISABLE_CACHE=1 FLASHJIT_NVRTC_LIBRARY=/nonexistent/libnvrtc.so",
                "compile " + spec + " --arch sm_80", out) == 4);
  CHECK(out.find("NVRTC could not be loaded: tried /nonexistent/libnvrtc.so") !=
        std::string::npos);
}

TEST_CASE("flashjit build --backward: the backward's three kernels beside the forward's, "
          "for each alignment") {
  TempDir dir;
  const std::string bundle_path = (dir.path() / "hd100_bwd.fjb").string();
  const std::string spec = std::string(FLASHJIT_SOURCE_DIR) + "/examples/embed/hd100.yaml";
  std::string out;
  REQUIRE(run_cli("FLASHJIT_DISABLE_CACHE=1",
                  "build " + spec + " --arch sm_80 --backward -o " + bundle_path, out) == 0);
  const Bundle bundle = read_bundle(read_file(bundle_path), bundle_path);
  REQUIRE(bundle.kernels.size() == 8);  // forward, pre, dK/dV, dQ at 16 and 8 bytes
  std::set<std::string> names;
  for (const Artifact& k : bundle.kernels) names.insert(k.kernel_name);
  for (int align : {16, 8})
    for (const auto& plan :
         flashjit::rt::plan_backward(hd100(), "sm_80", {.align_bytes = align}).launches)
      CHECK(names.count(plan.kernel_name) == 1);
}

TEST_CASE("flashjit build --backward on sm_90a: the warp-specialised dK/dV kernel that accumulates "
          "dQ and dQ's conversion for TMA-loadable tensors, the sm80 kernels for the others") {
  TempDir dir;
  const std::string bundle_path = (dir.path() / "hd128_bwd.fjb").string();
  const std::string spec = std::string(FLASHJIT_SOURCE_DIR) + "/configs/hd128.yaml";
  std::string out;
  REQUIRE(run_cli("FLASHJIT_DISABLE_CACHE=1",
                  "build " + spec + " --arch sm_90a --align 16,8 --backward -o " + bundle_path,
                  out) == 0);
  const Bundle bundle = read_bundle(read_file(bundle_path), bundle_path);
  std::set<std::string> names;
  for (const Artifact& k : bundle.kernels) names.insert(k.kernel_name);
  const flashjit::Spec hd128 = flashjit::Spec::from_file(spec);
  int sm90 = 0;
  for (const flashjit::gen::CallTraits call :
       {flashjit::gen::CallTraits{.align_bytes = 16, .tma_loadable = true},
        flashjit::gen::CallTraits{.align_bytes = 8, .tma_loadable = true},
        flashjit::gen::CallTraits{.align_bytes = 8, .tma_loadable = false}})
    for (const auto& plan : flashjit::rt::plan_backward(hd128, "sm_90a", call).launches) {
      CHECK(names.count(plan.kernel_name) == 1);
      sm90 += plan.path->id == flashjit::gen::KernelPath::BwdDkDvDqSm90 ||
              plan.path->id == flashjit::gen::KernelPath::BwdDqConvert;
    }
  CHECK(sm90 == 4);  // dK/dV/dQ and the conversion for both TMA-loadable alignments
}

TEST_CASE("flashjit build --backward --tune-db: the backward's tuned tilings the runtime would "
          "use, not those of another path or target") {
  TempDir dir;
  const std::string spec_path = std::string(FLASHJIT_SOURCE_DIR) + "/configs/hd64.yaml";
  const flashjit::Spec spec = flashjit::Spec::from_file(spec_path);
  flashjit::tune::BackwardEntry tuned;
  tuned.gpu = flashjit::tune::GpuIdentity{"NVIDIA A100", 8, 0, 108, 13000, "13.0"};
  tuned.spec_hash = flashjit::tune::spec_hash(spec);
  tuned.bucket = {4096, 4096, 128};
  tuned.target = "sm_80";
  tuned.dkdv_path = "bwd_dkdv_sm80";
  tuned.dq_path = "bwd_dq_sm80";
  tuned.tiles = {flashjit::Tiles{32, 64, 4, 2}, {}};  // dQ: the heuristic's
  flashjit::tune::BackwardEntry stale = tuned;  // tuned for a path the spec no longer takes
  stale.bucket.seqlen_q = 1024;
  stale.dkdv_path = "bwd_dkdv_sm90";
  stale.tiles.dkdv = flashjit::Tiles{64, 64, 4, 2};
  const std::string db = (dir.path() / "tune.json").string();
  flashjit::tune::TuneDb(db).record({tuned, stale});

  const std::string bundle_path = (dir.path() / "hd64_bwd.fjb").string();
  std::string out;
  REQUIRE(run_cli("FLASHJIT_DISABLE_CACHE=1",
                  "build " + spec_path + " --arch sm_80 --align 16 --backward --tune-db " + db +
                      " -o " + bundle_path,
                  out) == 0);
  std::set<std::string> names;
  for (const Artifact& k : read_bundle(read_file(bundle_path), bundle_path).kernels)
    names.insert(k.kernel_name);
  CHECK(names.size() == 5);  // forward, pre, dK/dV (heuristic and tuned), dQ
  // Auto tiles: every step the heuristic's.
  for (const flashjit::BackwardTiles& tiles : {flashjit::BackwardTiles{}, tuned.tiles})
    for (const auto& plan : flashjit::rt::plan_backward(spec, "sm_80", {}, &tiles).launches)
      CHECK_MESSAGE(names.count(plan.kernel_name) == 1, plan.kernel_name);
  CHECK(names.count(flashjit::rt::plan_backward(spec, "sm_80", {}, &stale.tiles)
                        .launches[1].kernel_name) == 0);
}

TEST_CASE("flashjit build -o: a device node, a symlink or a folder is refused before any "
          "compile and left as it was") {
  namespace fs = std::filesystem;
  TempDir dir;
  const std::string spec = std::string(FLASHJIT_SOURCE_DIR) + "/examples/embed/hd100.yaml";
  std::string out;
  if (fs::is_character_file("/dev/full")) {
    CHECK(run_cli("FLASHJIT_DISABLE_CACHE=1", "build " + spec + " --arch sm_80 -o /dev/full",
                  out) == 5);
    CHECK(out.find("cannot write bundle /dev/full: it is a device node") != std::string::npos);
    CHECK(fs::is_character_file("/dev/full"));
  }
  const fs::path victim = dir.path() / "victim";
  std::ofstream(victim) << "precious";
  const fs::path link = dir.path() / "link.fjb";
  fs::create_symlink(victim, link);
  CHECK(run_cli("FLASHJIT_DISABLE_CACHE=1", "build " + spec + " --arch sm_80 -o " +
                link.string(), out) == 5);
  CHECK(out.find("it is a symbolic link") != std::string::npos);
  CHECK(fs::is_symlink(link));
  CHECK(read_file(victim.string()) == "precious");
  CHECK(run_cli("FLASHJIT_DISABLE_CACHE=1", "build " + spec + " --arch sm_80 -o " +
                dir.str(), out) == 5);
  CHECK(out.find("it is a folder") != std::string::npos);
}

TEST_CASE("register_bundle_file: a folder or a FIFO is refused with Error(Io), without "
          "blocking") {
  TempDir dir;
  CHECK(message_of([&] { flashjit::register_bundle_file(dir.str()); }, ErrorKind::Io)
            .find("is a folder") != std::string::npos);
  const std::string fifo = (dir.path() / "fifo.fjb").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(message_of([&] { flashjit::register_bundle_file(fifo); }, ErrorKind::Io)
            .find("not a regular file") != std::string::npos);
  CHECK(message_of([&] { flashjit::register_bundle_file(fifo + ".missing"); }, ErrorKind::Io)
            .find("no such file") != std::string::npos);
}
