// What the tuners share: the device tensors a candidate is timed on (input sets rotated so that
// L2 never flatters one), the check of its output against the heuristic kernel's, and the
// timing loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "runtime/driver.h"

namespace flashjit::tune {

using Progress = std::function<void(const std::string& line)>;

struct TimingOptions {
  double budget_s = 0;  // wall-clock limit per spec; 0 = none
  int warmup = 3;
  int iters = 15;  // timed launches, median kept
  // A candidate replaces the heuristic only when it is faster by more than this fraction:
  // closer than that is timing noise, and the heuristic is the tested default.
  double min_gain = 0.01;
};

// The wall-clock time of one spec's tuning, measured against TimingOptions::budget_s.
class TuningClock {
 public:
  double seconds() const;
  bool budget_spent(const TimingOptions& options) const;

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The seed of every random input a tuning run makes: runs are repeatable.
inline constexpr uint64_t kSeed = 0x5eed;

// One timed call's sizes (contiguous tensors).
struct CallShape {
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1;
};
// "b16 h32/8 q1 k32768"
std::string describe(const CallShape& shape);

// Random numbers in `dtype` that every tensor of a tuning run is a window of, repeated where a
// tensor is larger (generating fresh numbers for every byte of a long KV cache would take
// longer than the tuning); `largest` is the largest tensor's element count.
std::vector<uint16_t> random_pool(DType dtype, size_t largest);
// The input tensors of one rotation set: each starts at its own place in the pool.
enum class PoolTensor { Q, K, V, dO };
// A device buffer of `elements` values: the pool from set `set`'s place for `tensor` on, then
// the pool from its start again as often as it takes.
rt::DeviceBuffer upload(const std::vector<uint16_t>& pool, size_t elements, int set,
                        PoolTensor tensor);

// The device tensors of one timed shape: `args` holds one input/output set each, rotated
// between launches, and the heuristic kernel's output on set 0, which every other candidate
// must reproduce.
struct TimedInputs {
  std::vector<rt::DeviceBuffer> buffers;  // q, k, v, o, lse per set
  std::vector<ForwardArgs> args;
  size_t o_elements = 0, lse_elements = 0;
  std::vector<uint16_t> heuristic_o;
  std::vector<float> heuristic_lse;
};
TimedInputs make_timed_inputs(const Spec& spec, const CallShape& shape,
                              const std::vector<uint16_t>& pool);

// Runs `kernel` once on set 0. The heuristic's run (`heuristic`) keeps its output as the
// reference and returns ""; any other returns "" when its output matches that reference,
// else why not.
std::string check_against_heuristic(Kernel& kernel, TimedInputs& inputs, DType dtype,
                                    bool heuristic);

// Median of `iters` event-timed launches after `warmup`, rotating input sets. Gives up after
// the first timed launch when it is `hopeless_ms` or slower (returns that launch's time).
double time_kernel(Kernel& kernel, const TimedInputs& inputs, int warmup, int iters,
                   double hopeless_ms);
// The same for any launch: `launch(n)` makes the n-th (n counts from 0, warm-up included).
double time_launches(const std::function<void(size_t n)>& launch, int warmup, int iters,
                     double hopeless_ms);

}  // namespace flashjit::tune
