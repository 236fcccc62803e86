#include "runtime/tune_entry_json.h"

#include <climits>
#include <cstdint>
#include <cstdio>

#include <fmt/format.h>

#include "runtime/decode_splits.h"

namespace flashjit::tune {
namespace {

using nlohmann::json;

constexpr const char* kTilesKind = "tiles";
constexpr const char* kDecodeKind = "decode_splits";
constexpr const char* kBackwardKind = "backward_tiles";

json tiles_json(const Tiles& t) {
  return {{"block_m", t.block_m}, {"block_n", t.block_n}, {"warps", t.warps},
          {"stages", t.stages}};
}

// The integer at `key`, which must fit an int: json's get<int>() truncates 2^40 and turns
// 3e60 into undefined behaviour (found by fuzz/fuzz_tune_db).
int int_at(const json& j, const char* key) {
  const json& value = j.at(key);
  if (value.is_number_unsigned() && value.get<uint64_t>() <= INT_MAX)
    return static_cast<int>(value.get<uint64_t>());
  if (value.is_number_integer() && !value.is_number_unsigned() &&
      value.get<int64_t>() >= INT_MIN && value.get<int64_t>() <= INT_MAX)
    return static_cast<int>(value.get<int64_t>());
  throw Error(ErrorKind::Cache, fmt::format("\"{}\" is not an integer that fits an int", key));
}

// An int at `key` in [low, high].
int int_in(const json& j, const char* key, int low, int high) {
  const int value = int_at(j, key);
  if (value < low || value > high)
    throw Error(ErrorKind::Cache,
                fmt::format("\"{}\" is {}, outside {}..{}", key, value, low, high));
  return value;
}

Tiles tiles_from(const json& j) {
  Tiles t{int_at(j, "block_m"), int_at(j, "block_n"), int_at(j, "warps"), int_at(j, "stages")};
  if (t.block_m < 1 || t.block_n < 1 || t.warps < 1 || t.stages < 1)
    throw Error(ErrorKind::Cache, fmt::format("tiles m{}n{}w{}s{} hold a value below 1",
                                              t.block_m, t.block_n, t.warps, t.stages));
  return t;
}

json gpu_json(const GpuIdentity& gpu) {
  return {{"name", gpu.name},
          {"compute_capability", fmt::format("{}.{}", gpu.cc_major, gpu.cc_minor)},
          {"sm_count", gpu.sm_count},
          {"driver_version", gpu.driver_version},
          {"nvrtc_version", gpu.nvrtc_version}};
}

GpuIdentity gpu_from(const json& j) {
  GpuIdentity gpu;
  gpu.name = j.at("name").get<std::string>();
  const std::string cc = j.at("compute_capability").get<std::string>();
  if (std::sscanf(cc.c_str(), "%d.%d", &gpu.cc_major, &gpu.cc_minor) != 2)
    throw Error(ErrorKind::Cache, fmt::format("compute_capability '{}' is not MAJOR.MINOR", cc));
  gpu.sm_count = int_at(j, "sm_count");
  gpu.driver_version = int_at(j, "driver_version");
  gpu.nvrtc_version = j.at("nvrtc_version").get<std::string>();
  return gpu;
}

// The fields every kind of entry has: the GPU and spec of its key, and what was measured when.
json common_json(const char* kind, const EntryRecord& e) {
  return {{"kind", kind},
          {"gpu", gpu_json(e.gpu)},
          {"spec_hash", e.spec_hash},
          {"spec", e.spec_summary},
          {"tuned_ms", e.tuned_ms},
          {"heuristic_ms", e.heuristic_ms},
          {"tuned_at", e.tuned_at}};
}

template <class Entry>
Entry common_from(const json& j) {
  Entry e;
  e.gpu = gpu_from(j.at("gpu"));
  e.spec_hash = j.at("spec_hash").get<std::string>();
  e.spec_summary = j.value("spec", "");
  e.tuned_ms = j.value("tuned_ms", 0.0);
  e.heuristic_ms = j.value("heuristic_ms", 0.0);
  e.tuned_at = j.value("tuned_at", "");
  return e;
}

json bucket_json(const ShapeBucket& b) {
  return {{"seqlen_q", b.seqlen_q}, {"seqlen_k", b.seqlen_k}, {"batch_heads", b.batch_heads}};
}

ShapeBucket bucket_from(const json& j) {
  return {int_at(j, "seqlen_q"), int_at(j, "seqlen_k"), int_at(j, "batch_heads")};
}

TuneEntry tiles_entry_from(const json& j) {
  TuneEntry e = common_from<TuneEntry>(j);
  e.bucket = bucket_from(j.at("bucket"));
  e.target = j.at("target").get<std::string>();
  e.tiles = tiles_from(j.at("tiles"));
  if (j.contains("heuristic_tiles")) e.heuristic_tiles = tiles_from(j.at("heuristic_tiles"));
  return e;
}

// One backward step of an entry: its path's name, its tiles and the heuristic's. Both tiles are
// optional: auto ones (a step whose path tunes nothing; a heuristic not known) are left out
// rather than written as zeros, which tiles_from refuses.
json step_json(const std::string& path, const Tiles& tiles, const Tiles& heuristic) {
  json j = {{"path", path}};
  if (!tiles.is_auto()) j["tiles"] = tiles_json(tiles);
  if (!heuristic.is_auto()) j["heuristic_tiles"] = tiles_json(heuristic);
  return j;
}

void step_from(const json& j, std::string& path, Tiles& tiles, Tiles& heuristic) {
  path = j.at("path").get<std::string>();
  if (j.contains("tiles")) tiles = tiles_from(j.at("tiles"));
  if (j.contains("heuristic_tiles")) heuristic = tiles_from(j.at("heuristic_tiles"));
}

BackwardEntry backward_entry_from(const json& j) {
  BackwardEntry e = common_from<BackwardEntry>(j);
  e.bucket = bucket_from(j.at("bucket"));
  e.target = j.at("target").get<std::string>();
  step_from(j.at("dkdv"), e.dkdv_path, e.tiles.dkdv, e.heuristic_tiles.dkdv);
  step_from(j.at("dq"), e.dq_path, e.tiles.dq, e.heuristic_tiles.dq);
  return e;
}

DecodeEntry decode_entry_from(const json& j) {
  DecodeEntry e = common_from<DecodeEntry>(j);
  const json& bucket = j.at("bucket");
  e.bucket = {int_in(bucket, "packed_rows", 1, INT_MAX), int_in(bucket, "seqlen_k", 1, INT_MAX),
              int_in(bucket, "batch_heads_kv", 1, INT_MAX)};
  e.kv_splits = int_in(j, "kv_splits", 0, rt::kMaxKvSplits);
  if (j.contains("heuristic_kv_splits"))
    e.heuristic_kv_splits = int_in(j, "heuristic_kv_splits", 1, rt::kMaxKvSplits);
  return e;
}

}  // namespace

json entry_json(const TuneEntry& e) {
  json j = common_json(kTilesKind, e);
  j["bucket"] = bucket_json(e.bucket);
  j["target"] = e.target;
  j["tiles"] = tiles_json(e.tiles);
  // Optional, as tiles_entry_from reads it: an entry read without heuristic tiles must not be
  // written back with zeros, which the next read refuses (found by fuzz/fuzz_tune_db).
  if (!e.heuristic_tiles.is_auto()) j["heuristic_tiles"] = tiles_json(e.heuristic_tiles);
  return j;
}

json entry_json(const DecodeEntry& e) {
  json j = common_json(kDecodeKind, e);
  j["bucket"] = {{"packed_rows", e.bucket.packed_rows},
                 {"seqlen_k", e.bucket.seqlen_k},
                 {"batch_heads_kv", e.bucket.batch_heads_kv}};
  j["kv_splits"] = e.kv_splits;
  // Optional like heuristic_tiles: 0 (not known) is not a count the next read accepts.
  if (e.heuristic_kv_splits > 0) j["heuristic_kv_splits"] = e.heuristic_kv_splits;
  return j;
}

json entry_json(const BackwardEntry& e) {
  json j = common_json(kBackwardKind, e);
  j["bucket"] = bucket_json(e.bucket);
  j["target"] = e.target;
  j["dkdv"] = step_json(e.dkdv_path, e.tiles.dkdv, e.heuristic_tiles.dkdv);
  j["dq"] = step_json(e.dq_path, e.tiles.dq, e.heuristic_tiles.dq);
  return j;
}

void read_entry(const json& j, TuneDbEntries& into) {
  const auto kind = j.find("kind");
  if (kind == j.end() || *kind == kTilesKind) {
    into.tiles.push_back(tiles_entry_from(j));
  } else if (*kind == kDecodeKind) {
    into.decode.push_back(decode_entry_from(j));
  } else if (*kind == kBackwardKind) {
    into.backward.push_back(backward_entry_from(j));
  } else {
    throw Error(ErrorKind::Cache,
                fmt::format("entry kind {} is not one this flashjit reads (\"{}\", \"{}\", "
                            "\"{}\")",
                            brief(*kind), kTilesKind, kDecodeKind, kBackwardKind));
  }
}

std::string brief(const json& value) {
  if (value.is_structured()) return value.is_array() ? "(a list)" : "(an object)";
  const std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

}  // namespace flashjit::tune
