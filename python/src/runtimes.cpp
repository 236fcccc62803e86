#include "python/src/runtimes.h"

#include <map>
#include <memory>
#include <mutex>

namespace flashjit::py {

Runtime& runtime_for(int ordinal) {
  static std::mutex mutex;
  // Never destroyed: kernels held by Python objects may outlive module teardown, and a
  // Runtime's destructor at exit would race the driver's own unloading.
  static auto* runtimes = new std::map<int, std::unique_ptr<Runtime>>();
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Runtime>& runtime = (*runtimes)[ordinal];
  if (!runtime) {
    RuntimeOptions options;
    options.device = ordinal;
    runtime = std::make_unique<Runtime>(options);
  }
  return *runtime;
}

}  // namespace flashjit::py
