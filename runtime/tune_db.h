// The tune DB: a JSON file a person can read, review and ship with an application, holding
// the fastest tiles measured per (GPU, spec, shape bucket), forward and backward, and the
// fastest decode key-split count per (GPU, spec, decode bucket). Path: FLASHJIT_TUNE_DB, else
// <cache dir>/tune.json.
//
// Concurrency: readers take no lock and always see a whole file, because writers replace it
// by rename. Writers serialise on an flock of "<db>.lock" (released by the kernel when a
// writer dies, so a killed process never blocks later ones), re-read the file under that
// lock, merge their entries into it, write a unique temporary file in the same folder and
// rename it over the DB. The lock only orders writers; the rename alone keeps readers safe.
// Readers never change the file: a DB that cannot be read is an error (load) or a warning and
// the heuristic's tiles (lookup), and one bad entry is skipped with a warning. Only a writer
// sets a DB aside, renamed to "<db>.corrupt-<unix time>", when it cannot keep it whole.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "runtime/tune_key.h"

namespace flashjit::tune {

// What every kind of entry holds beside its bucket and result: the GPU and spec of its key,
// and the time of the tuned and the heuristic's choice (the backward's: the whole backward,
// D pre-pass, dK/dV and dQ) on the bucket's timed shape, and when.
struct EntryRecord {
  GpuIdentity gpu;
  std::string spec_hash;
  std::string spec_summary;  // for people reading the file; not part of the key
  double tuned_ms = 0;
  double heuristic_ms = 0;
  std::string tuned_at;  // UTC, ISO 8601
};

// The tiles of forward calls in one shape bucket (`flashjit tune`).
struct TuneEntry : EntryRecord {
  ShapeBucket bucket;
  std::string target;  // "sm_90a"
  Tiles tiles;
  Tiles heuristic_tiles;
};

// The key splits of decode calls in one decode bucket (`flashjit tune --decode`).
struct DecodeEntry : EntryRecord {
  DecodeBucket bucket;
  // The fastest count measured, or 0 when none beat the heuristic's by the tuner's min_gain:
  // the bucket then keeps the heuristic, whose count follows each call's own shape.
  int kv_splits = 0;
  int heuristic_kv_splits = 0;  // the heuristic's count on the timed shape (0: not known)
};

// The backward's tiles of calls in one shape bucket (`flashjit tune --backward`): its dK/dV
// and dQ steps', each with the name of the path it was tuned for, so that an entry for a path
// the spec no longer takes (a changed registry, a spec now deterministic) is not used.
struct BackwardEntry : EntryRecord {
  ShapeBucket bucket;
  std::string target;    // "sm_90a"
  std::string dkdv_path;  // "bwd_dkdv_sm90" (KernelPathInfo::name)
  std::string dq_path;    // "bwd_dq_sm90"
  BackwardTiles tiles;            // an auto step: its heuristic's (a path that tunes nothing)
  BackwardTiles heuristic_tiles;  // auto when not known
};

// What a DB holds, by kind.
struct TuneDbEntries {
  std::vector<TuneEntry> tiles;
  std::vector<DecodeEntry> decode;
  std::vector<BackwardEntry> backward;
};

// Where the DB lives for this process (FLASHJIT_TUNE_DB, else <cache dir>/tune.json).
std::string default_db_path();

// What a lookup found, and why, for FLASHJIT_VERBOSE.
template <class Entry>
struct Found {
  std::optional<Entry> entry;  // set when an entry matches GPU, spec and bucket
  int ignored_other_gpu = 0;   // entries for this spec and bucket made on another GPU
  std::string note;            // one line: what was used or why nothing was
};
using Lookup = Found<TuneEntry>;
using DecodeLookup = Found<DecodeEntry>;
using BackwardLookup = Found<BackwardEntry>;

class TuneDb {
 public:
  explicit TuneDb(std::string path);
  const std::string& path() const { return path_; }

  // Every good entry in the file (none when it does not exist); a bad entry (an unknown kind
  // too) is skipped with a warning on stderr. Throws Error(Io) for a file that cannot be read
  // (a folder, a FIFO, over 64 MiB) and Error(Cache) for one that is not a tune DB of this
  // version.
  TuneDbEntries load() const;
  // The entry for this GPU, spec and bucket; entries of other GPUs are counted, not used. An
  // unusable DB is a warning on stderr and no entry, never an exception.
  Lookup lookup(const GpuIdentity& gpu, const std::string& spec_hash,
                const ShapeBucket& bucket) const;
  DecodeLookup lookup(const GpuIdentity& gpu, const std::string& spec_hash,
                      const DecodeBucket& bucket) const;
  BackwardLookup lookup_backward(const GpuIdentity& gpu, const std::string& spec_hash,
                                 const ShapeBucket& bucket) const;
  // Merges `entries` into the file (each replaces an entry of the same GPU, spec and bucket)
  // under the writers' lock, atomically. Throws Error(Io) when the folder or the file cannot
  // be written.
  void record(const std::vector<TuneEntry>& entries) const;
  void record(const std::vector<DecodeEntry>& entries) const;
  void record(const std::vector<BackwardEntry>& entries) const;

 private:
  void merge_into_file(const TuneDbEntries& entries) const;

  std::string path_;
};

// The file's JSON text for `entries` (sorted, so the file diffs well), and back. parse
// throws Error(Cache) naming what is wrong when the text as a whole is not a tune DB, and
// lists each entry it cannot read in `skipped` ("<source>: entries[3]: why").
struct ParsedDb {
  TuneDbEntries entries;
  std::vector<std::string> skipped;
};
std::string serialize(const TuneDbEntries& entries);
ParsedDb parse(const std::string& text, const std::string& source);

}  // namespace flashjit::tune
