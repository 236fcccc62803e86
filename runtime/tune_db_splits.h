// The tune DB's key-split counts for decode calls (`flashjit tune --decode`), as the runtime
// asks for them: once a decode bucket, each kernel keeping the answer, since a decode loop
// calls every token and the DB is a file.
#pragma once

#include <string>

#include "flashjit/flashjit.h"
#include "runtime/tune_key.h"

namespace flashjit::rt {

struct TunedKvSplits {
  int splits = 0;    // 0: none (no entry, or one that keeps the heuristic)
  std::string note;  // what the DB held and where, for FLASHJIT_VERBOSE
};

// The count in the tune DB (FLASHJIT_TUNE_DB, else <cache dir>/tune.json) for decode calls of
// `spec` in `bucket` on `device`. A DB that cannot be read is never an error for the caller:
// 0, and the note says why.
TunedKvSplits tuned_kv_splits(const Spec& spec, const DeviceInfo& device,
                              const tune::DecodeBucket& bucket);

}  // namespace flashjit::rt
