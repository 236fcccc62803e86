#include "autotune/tile_tuning.h"

#include <algorithm>

#include <fmt/format.h>

#include "generator/targets.h"

namespace flashjit::tune {
namespace {

// The benchmark's shapes (bench/shapes.py, the FlashAttention papers).
constexpr int kTokens = 16384;
constexpr int kHidden = 2048;

}  // namespace

TimedShape timed_shape(const Spec& spec, int seqlen, const std::optional<int>& batch_heads) {
  if (seqlen < 1) throw Error(ErrorKind::Usage, fmt::format("seqlen {} must be >= 1", seqlen));
  if (batch_heads) {
    if (*batch_heads < 1)
      throw Error(ErrorKind::Usage, fmt::format("--batch-heads {} must be >= 1", *batch_heads));
    return {1, *batch_heads, seqlen};
  }
  return {std::max(1, kTokens / seqlen), std::max(1, kHidden / spec.head_dim_qk), seqlen};
}

CallShape call_shape(const TimedShape& s) {
  return {s.batch, s.heads, s.heads, s.seqlen, s.seqlen};
}

ShapeBucket bucket_of(const TimedShape& s) {
  return bucket_for(s.seqlen, s.seqlen, s.batch, s.heads);
}

TuningSetup tuning_setup(Runtime& runtime, const Spec& spec, const TuneOptions& options) {
  if (!runtime.has_device())
    throw Error(ErrorKind::NoDevice, fmt::format("tuning {} needs a GPU: {}", spec.name,
                                                 rt::Driver::unavailable_reason()));
  if (options.seqlens.empty()) throw Error(ErrorKind::Usage, "no seqlens to tune");
  TuningSetup setup;
  setup.device = runtime.device();
  setup.target = gen::target_for_device(setup.device.cc_major, setup.device.cc_minor);
  for (int seqlen : options.seqlens)
    setup.shapes.push_back(timed_shape(spec, seqlen, options.batch_heads));
  return setup;
}

std::vector<uint16_t> pool_for(const Spec& spec, const std::vector<TimedShape>& shapes) {
  size_t largest = 0;
  for (const TimedShape& s : shapes)
    largest = std::max(largest, size_t{1} * s.batch * s.heads * s.seqlen *
                                    std::max(spec.head_dim_qk, spec.head_dim_v));
  return random_pool(spec.dtype, largest);
}

verify::Shape check_shape() {
  verify::Shape shape;
  shape.heads_q = 2;
  shape.seqlen_q = 257;
  shape.seqlen_k = 300;
  return shape;
}

}  // namespace flashjit::tune
