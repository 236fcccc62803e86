#include "runtime/decode_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "generator/dec_sm80_path.h"
#include "generator/targets.h"
#include "generator/tile_rules.h"
#include "runtime/call_traits.h"
#include "runtime/forward_params.h"

namespace flashjit::rt {
namespace {

bool decode_serves(const Spec& spec, const ForwardArgs& args) {
  return args.cu_seqlens_q == nullptr && gen::decode_serves_mask(spec);
}

}  // namespace

int decode_packed_rows(const ForwardArgs& args) {
  return args.seqlen_q * (args.heads_q / args.heads_kv);
}

bool takes_decode(const Spec& spec, const ForwardArgs& args, std::string* why) {
  if (args.cache_seqlens != nullptr || args.block_table != nullptr) {
    if (why) *why = "the call has a KV cache";
    return true;
  }
  if (!decode_serves(spec, args) || spec.decode == DecodeMode::Never) return false;
  if (spec.decode == DecodeMode::Always) {
    if (why) *why = "the spec says decode: always";
    return true;
  }
  const int rows = decode_packed_rows(args);
  if (rows > kDecodeMaxPackedRows || args.seqlen_k < kDecodeMinKeys) return false;
  if (why)
    *why = fmt::format("{} packed query rows (seqlen_q {} x group {}) against {} keys", rows,
                       args.seqlen_q, args.heads_q / args.heads_kv, args.seqlen_k);
  return true;
}

KvSplitRange decode_kv_split_range(const gen::Plan& split_plan, const ForwardArgs& args,
                                   int sm_count) {
  const LaunchGeometry g = launch_geometry(split_plan, args, sm_count);
  const long long ctas = 1LL * g.grid_x * g.grid_y * g.grid_z;
  // A window bounds the band of keys the rows see; causal leaves it the whole cache.
  long long keys = args.seqlen_k;
  if (args.cache_seqlens == nullptr && split_plan.spec.mask == MaskKind::SlidingWindow)
    keys = std::min<long long>(keys, 1LL * split_plan.spec.window_left +
                                         split_plan.spec.window_right + args.seqlen_q);
  const int block_n = split_plan.tiles.block_n;
  const int key_tiles = static_cast<int>((keys + block_n - 1) / block_n);
  // CTAs on one multiprocessor share its reads; a second adds speed only where a tile's
  // arithmetic is a large share of its time, at K and V rows of up to 256 bytes a key, or
  // where a paged cache's copies wait on the block table's reads. On an H100 (bench/NOTES.md
  // entries 46-47) the counts for two CTAs a multiprocessor ran 1-4% faster on 8 of d64's 12
  // split rows, those for one 1-16% faster on every dense split row at d128 and 6-26% slower
  // on its paged ones.
  constexpr int kSharedReadKeyBytes = 256;
  constexpr int kReservedShared = 1024;  // the driver's own shared memory a CTA
  const int per_sm = (gen::max_shared_bytes(split_plan.target) + kReservedShared) /
                     (split_plan.shared_bytes + kReservedShared);
  const gen::PaddedDims dims = gen::padded_dims(split_plan.spec);
  const int key_bytes = (dims.d_qk_pad + dims.dv_slice) * dims.element_bytes;
  const bool shares_reads = key_bytes <= kSharedReadKeyBytes || split_plan.call.paged;
  const int readers = std::max(sm_count, 1) * (shares_reads ? std::clamp(per_sm, 1, 2) : 1);
  // The grid's z (batch x column splits x key splits) is at most 65535.
  const long long z_room = 65535 / std::max<long long>(g.grid_z, 1);
  const int most = static_cast<int>(
      std::max<long long>(1, std::min<long long>({kMaxKvSplits, key_tiles, z_room})));
  return {std::min(decode_kv_splits(ctas, key_tiles, readers), most), most};
}

std::vector<ScratchBuffer> decode_scratch(const Spec& spec, const ForwardArgs& args,
                                          int kv_splits) {
  if (kv_splits <= 1) return {};
  const size_t rows = static_cast<size_t>(kv_splits) * static_cast<size_t>(args.batch) *
                      static_cast<size_t>(args.heads_q) * static_cast<size_t>(args.seqlen_q);
  return {{"o_partial", sizeof(float) * rows * static_cast<size_t>(spec.head_dim_v)},
          {"lse_partial", sizeof(float) * rows}};
}

DecParams make_dec_params(const Spec& spec, const ForwardArgs& args, int kv_splits,
                          void* workspace) {
  DecParams params{};
  fill_attn_params(params, spec, args);
  params.cache_seqlens = args.cache_seqlens;
  params.block_table = args.block_table;
  params.page_size = args.page_size;
  const auto page_size = static_cast<unsigned>(args.page_size);
  params.page_shift = args.page_size > 0 && std::has_single_bit(page_size)
                          ? std::countr_zero(page_size)
                          : -1;
  params.max_pages = args.max_pages;
  params.num_pages = args.num_pages;
  params.kv_splits = kv_splits;
  if (kv_splits > 1) {
    const std::vector<void*> buffers =
        scratch_pointers(decode_scratch(spec, args, kv_splits), workspace);
    params.o_partial = static_cast<float*>(buffers[0]);
    params.lse_partial = static_cast<float*>(buffers[1]);
  }
  return params;
}

}  // namespace flashjit::rt
