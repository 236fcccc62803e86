#include "autotune/candidates.h"

#include <algorithm>

#include <fmt/format.h>

#include "generator/plan.h"
#include "generator/tile_heuristic.h"

namespace flashjit::tune {

int accumulator_registers(int dv_slice, const Tiles& tiles) {
  const int row_groups = tiles.block_m / (16 * tiles.warps);
  return row_groups * (dv_slice / 2 + tiles.block_n / 2);
}

CandidateSpace candidate_space(const Spec& spec, const std::string& target) {
  spec.validate();
  if (!spec.tiles.is_auto())
    throw Error(ErrorKind::Usage,
                fmt::format("spec {} fixes its tiles ({}); remove `tiles:` to tune it", spec.name,
                            tiles_label(spec.tiles)));
  if (spec.mask == MaskKind::BlockSparse)
    throw Error(ErrorKind::Usage,
                fmt::format("spec {}: a block_sparse kernel's speed depends on the run-time "
                            "layout it is given, which tuning does not know; give it tiles "
                            "(they must divide block_q / block_k) or leave them to the heuristic",
                            spec.name));
  if (!gen::is_known_target(target))
    throw Error(ErrorKind::Usage, fmt::format("unknown target '{}'", target));

  const gen::PaddedDims dims = gen::padded_dims(spec);
  const int d = std::max(dims.d_qk_pad, dims.dv_slice);
  const bool sm90 = gen::sm90_serves(spec, target);

  CandidateSpace space;
  const Tiles heuristic = gen::default_tiles(spec, target);
  space.candidates.push_back(heuristic);
  const auto consider = [&](const Tiles& t) {
    if (t == heuristic) return;
    std::string reason = gen::tiles_problem(spec, target, t);
    if (!sm90 && reason.empty() &&
        accumulator_registers(dims.dv_slice, t) > kMaxAccumulatorRegisters)
      reason = fmt::format("{} fp32 accumulator registers a thread (more than {} spills)",
                           accumulator_registers(dims.dv_slice, t), kMaxAccumulatorRegisters);
    if (reason.empty())
      space.candidates.push_back(t);
    else
      space.pruned.push_back({t, std::move(reason)});
  };
  if (sm90) {
    // The warp-specialised kernel's knobs: the key block (wgmma N of S) and the ring depth.
    for (int block_n : {48, 64, 80, 96, 112, 128, 160, 176, 192})
      for (int stages : {2, 3, 4}) consider(Tiles{gen::kSm90BlockM, block_n, gen::kSm90Warps, stages});
    return space;
  }
  std::vector<int> block_ns = {32, 64, 128};
  if (d > 192) block_ns.insert(block_ns.begin(), 16);
  for (int block_m : {64, 128})
    for (int block_n : block_ns)
      for (int warps : {4, 8})
        for (int stages : {2, 3}) consider(Tiles{block_m, block_n, warps, stages});
  return space;
}

std::string tiles_label(const Tiles& t) {
  return fmt::format("m{}n{}w{}s{}", t.block_m, t.block_n, t.warps, t.stages);
}

}  // namespace flashjit::tune
