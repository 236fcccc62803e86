// The kernel paths: one descriptor for each compiled kernel family (the forward's, the
// backward's, decode's and the merge's today; fp8's next), in one registry that plan, emit, the tuner,
// bundles and the CLI iterate instead of branching on the architecture. A new path is a
// descriptor here, its rules in generator/<path>_path.cpp and its kernel in templates/
// (docs/ARCHITECTURE.md has the checklist).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/tile_rules.h"

namespace flashjit::gen {

struct Plan;

// The registry's paths. The order of kernel_paths() is the order of preference.
enum class KernelPath {
  FwdSm90, FwdSm80, BwdPre, BwdDkDvDqSm90, BwdDkDvDqOrderedSm90, BwdDkDvPairedSm90, BwdDkDvSm90,
  BwdDkDvSm80, BwdDqConvert, BwdDqSm90, BwdDqPairedSm90, BwdDqSm80, DecSm80, DecCombine, Merge
};

// What the runtime runs for a public call; each is a list of launches of paths.
enum class Operation { Forward, Backward, Decode, Merge };
const char* to_string(Operation operation);  // "forward" | "backward" | "decode" | "merge"

// One launch of an operation, which a path serves: the forward is one step; the backward is
// D = rowsum(dO * O), then dK/dV and dQ (or dK/dV with dQ accumulated, then dQ's conversion
// from the accumulator); decode is the split kernel, then (when the keys were
// split) the combine of the partial outputs; the merge of two results is one step.
enum class Step { Forward, BwdPre, BwdDkDv, BwdDq, DecSplit, DecCombine, Merge };
// "forward" | "bwd_pre" | "bwd_dkdv" | "bwd_dq" | "dec_split" | "dec_combine" | "merge"
const char* to_string(Step step);
Operation operation_of(Step step);


// What a call contributes to its plan, derived by the runtime from the call's pointers and
// sizes (runtime/call_traits.h): each distinct value is a kernel variant of its own.
struct CallTraits {
  int align_bytes = 16;       // every row start of Q/K/V/O is a multiple of this (16/8/4/2)
  bool tma_loadable = true;   // TMA can load the call's Q, K and V
  bool varlen = false;        // packed variable-length batches (cu_seqlens)
  bool paged = false;         // decode: K/V in pages addressed through a block table
  bool operator==(const CallTraits&) const = default;
  auto operator<=>(const CallTraits&) const = default;
};

// What a path's grid covers: blocks of block_m query rows of every query head (the forward,
// dQ), blocks of block_n keys of every kv head (dK/dV), or blocks of block_m packed rows (the
// query rows of a GQA group) of every kv head, times the key splits (decode); z is batch *
// column splits. The row passes (decode's combine, the merge) take block_m rows of every
// (batch, query head) a CTA.
enum class GridOver { QueryRows, KeyRows, PackedRows, CombineRows };

struct KernelPathInfo {
  KernelPath id;
  const char* name;   // the registry's name: "fwd_sm80"
  const char* label;  // the kernel family in messages and generated comments: "sm80"
  const char* kernel_prefix;  // of its kernel names: "fa_fwd"
  Step step;
  const char* template_file;  // the kernel body the program includes (templates/)
  // The device layout struct (templates/kernels/): emit_source static_asserts that its
  // kSharedBytes and kThreads equal the plan's, so host and device agree by construction.
  const char* layout;
  // A persistent grid: one CTA a multiprocessor, drawing tiles from a per-stream counter
  // (runtime/tile_counters.h) that the launch passes in the parameters.
  bool persistent_grid;
  // Q, K and V arrive through TMA tensor maps, passed after the parameter struct.
  bool tma_loads;
  GridOver grid_over;

  // Does the path serve `spec` on `target` for a call with these traits?
  bool (*serves)(const Spec& spec, const std::string& target, const CallTraits& call);
  // The built-in tiles for `spec` on `target` and a call with these traits (throws
  // Error(Usage) when none fits). Packed rows of a narrow alignment take more copies a tile,
  // which need registers: the sm80 forward gives them smaller tiles where ptxas spilled.
  Tiles (*default_tiles)(const Spec& spec, const std::string& target, const CallTraits& call);
  // Why `tiles` cannot run this path's kernel on `target` ("" when they can): its tile rules,
  // shared memory and registers. The spec's block mask is checked apart (mask_tiles_problem).
  std::string (*tiles_problem)(const PaddedDims& dims, const Tiles& tiles,
                               const std::string& target);
  // Do its tiles lie inside the spec's mask blocks (block_m divides block_q, block_n block_k)?
  // The walks over mask blocks need it; a path that ignores block masks does not.
  bool tiles_in_mask_blocks;
  ColumnSplit (*column_split)(const PaddedDims& dims);
  // Dynamic shared memory a CTA needs (the emitted source static_asserts the device layout
  // agrees).
  int (*shared_bytes)(const PaddedDims& dims, const Tiles& tiles);
  // The tilings the tuner tries besides the default, before any check.
  std::vector<Tiles> (*tuning_grid)(const Spec& spec);
  // Why the tuner should not compile `tiles` though tiles_problem accepts them ("" when it
  // should): a cost model's prediction of spills, say.
  std::string (*tuning_problem)(const PaddedDims& dims, const Tiles& tiles);
  // The tiles' part of kernel names: "m64n64w4s2", "ws_n128s3".
  std::string (*tiles_label)(const Tiles& tiles);
  // The source the plan's program needs after the templates and before its KernelConfig
  // (instruction shapes written out for its tiles), and its extern "C" entry after the
  // layout checks.
  std::string (*extra_source)(const Plan& plan);
  std::string (*entry)(const Plan& plan);
  // The bytes of a row of a panel of the head-dim tiles its TMA loads write (the tensor maps'
  // swizzle span: 128, 64 or 32) for `tiles`; null: 128.
  int (*panel_row_bytes)(const PaddedDims& dims, const Tiles& tiles) = nullptr;
  // It adds dQ into the backward's fp32 dq_accum scratch, which the runtime zeroes and the
  // BwdDqConvert path's launch turns into dQ.
  bool accumulates_dq = false;
  // It makes those adds in key-block order, counting them in the dq_turns scratch (zeroed
  // too): deterministic.
  bool orders_dq_adds = false;
};

// Pieces several paths' descriptors share.
bool serves_every_target(const Spec& spec, const std::string& target, const CallTraits& call);
std::string no_tuning_problem(const PaddedDims& dims, const Tiles& tiles);
std::string no_extra_source(const Plan& plan);
std::vector<Tiles> no_tuning_grid(const Spec& spec);
int no_shared_memory(const PaddedDims& dims, const Tiles& tiles);
// Every output column in one CTA.
ColumnSplit whole_columns(const PaddedDims& dims);
// The row passes (decode's combine, the merge): a warp a row, four rows a CTA, which keep
// enough rows in flight for a pass that reads each once; labelled "w4".
Tiles warp_a_row_tiles(const Spec& spec, const std::string& target, const CallTraits& call);
std::string warp_a_row_problem(const PaddedDims& dims, const Tiles& tiles,
                               const std::string& target);
std::string warps_label(const Tiles& tiles);
// The extern "C" entry of a kernel that takes one parameter struct: `params_type` by value,
// passed to the device function template `function`<KernelConfig>. `min_ctas` > 0 adds the
// CTAs an SM should hold to the launch bounds; 0 leaves them to ptxas, except for rows of a
// narrow alignment, whose launch bounds name the most CTAs that leave a thread 255 registers.
std::string struct_entry(const Plan& plan, const char* params_type, const char* function,
                         int min_ctas = 0);
// The CTAs an SM holds by shared memory, for an entry's launch bounds, where they still leave
// a thread 255 registers (one or two CTAs of 128 threads), else 0. ptxas knows the CTA's
// threads but not that shared memory caps the CTAs an SM holds: told nothing, it may aim at
// an occupancy the SM never reaches and spill to get there (168 registers, three CTAs of 128
// threads: qk33 causal and 192/128 with a pattern mask spilled on sm_80, where shared memory
// holds two and one). Naming more CTAs would cap a kernel that needs more registers than that
// occupancy leaves it (and holds fewer CTAs today) below its need.
int full_register_ctas(const Plan& plan);
// Does `problem` accept any of `preferred` on `target` (a path's serves(): dims its tiles hold)?
bool some_tiles_fit(std::span<const Tiles> preferred, const PaddedDims& dims,
                    const std::string& target,
                    std::string (*problem)(const PaddedDims&, const Tiles&, const std::string&));
// The first of `preferred` that `problem` accepts on `target` and whose tiles lie inside the
// spec's mask blocks; Error(Usage) "no <kernel> tile configuration fits ..." when none does.
Tiles first_fitting_tiles(std::span<const Tiles> preferred, const Spec& spec,
                          const std::string& target,
                          std::string (*problem)(const PaddedDims&, const Tiles&,
                                                 const std::string&),
                          const char* kernel);

// Every path, in the order of preference.
std::span<const KernelPathInfo* const> kernel_paths();
const KernelPathInfo& kernel_path(KernelPath id);
const char* to_string(KernelPath id);  // the label: "sm80" | "sm90"

// The path that serves `step` for `spec` on `target` and this call: the first in
// kernel_paths() order whose serves() accepts it. Throws Error(Usage) naming the step when
// none does (an operation not built yet).
const KernelPathInfo& choose_path(Step step, const Spec& spec, const std::string& target,
                                  const CallTraits& call = {});

// The heuristic's tiles for `step` of a call with `call`'s traits on the path that serves it
// for 16-byte aligned, TMA-loadable calls (the spec's primary path, whose tiles a spec's own
// `tiles:` and the tune DB refer to).
Tiles default_tiles(const Spec& spec, const std::string& target, Step step = Step::Forward,
                    const CallTraits& call = {});
// Why `tiles` cannot run `spec` on `target` with `path` ("" when they can): the path's tile
// rules, shared memory and registers, and the spec's block mask.
std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles,
                          const KernelPathInfo& path);
// The same with the spec's primary path.
std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles,
                          Step step = Step::Forward);

}  // namespace flashjit::gen
