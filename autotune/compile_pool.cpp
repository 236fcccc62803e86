#include "autotune/compile_pool.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace flashjit::tune {

int spilled_bytes(const CompileOutcome& outcome) {
  int bytes = 0;
  for (const CompileReport& r : outcome.reports) bytes += r.spill_store_bytes + r.spill_load_bytes;
  return bytes;
}

std::string describe(const CompileOutcome& outcome) {
  std::vector<std::string> kernels;
  for (const CompileReport& r : outcome.reports)
    kernels.push_back(fmt::format("{} registers, {} B shared, {:.0f} ms{}", r.registers,
                                  r.shared_bytes, r.compile_ms, r.cache_hit ? " (cache hit)" : ""));
  return fmt::format("{}", fmt::join(kernels, " | "));
}

CompilePool::CompilePool(size_t count, Compile compile, unsigned threads) : promises_(count) {
  for (auto& p : promises_) futures_.push_back(p.get_future());
  const auto work = [this, compile = std::move(compile), count] {
    for (size_t i = next_++; i < count && !stop_; i = next_++) {
      CompileOutcome outcome;
      try {
        outcome.reports = compile(i);
      } catch (const std::exception& error) {  // an escaping exception would end the process
        outcome.error = error.what();
      }
      promises_[i].set_value(std::move(outcome));
    }
  };
  for (unsigned t = 0; t < threads; ++t) threads_.emplace_back(work);
}

unsigned compile_threads(unsigned threads) {
  return threads ? threads : std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace flashjit::tune
