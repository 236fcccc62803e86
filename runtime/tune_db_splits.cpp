#include "runtime/tune_db_splits.h"

#include <fmt/format.h>

#include "runtime/tune_db.h"

namespace flashjit::rt {

TunedKvSplits tuned_kv_splits(const Spec& spec, const DeviceInfo& device,
                              const tune::DecodeBucket& bucket) {
  try {
    const tune::DecodeLookup found = tune::TuneDb(tune::default_db_path())
                                         .lookup(tune::gpu_identity(device),
                                                 tune::spec_hash(spec), bucket);
    return {found.entry ? found.entry->kv_splits : 0, found.note};
  } catch (const Error& error) {
    return {0, fmt::format("tune DB unusable: {}", error.what())};
  }
}

}  // namespace flashjit::rt
