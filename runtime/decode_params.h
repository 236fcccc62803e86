// Decode as the runtime runs it: whether a forward call takes the decode kernels, the scratch
// its split launches write, and the parameters both launches share.
#pragma once

#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "runtime/decode_splits.h"
#include "runtime/operation.h"
#include "templates/kernels/dec_params.cuh"

namespace flashjit::rt {

// Does this forward call run the decode kernels? `why`, when given, gets the reason (for
// FLASHJIT_VERBOSE; formatting it every call would cost a decode loop).
// A KV cache always does (check_forward_args has refused one that decode cannot serve);
// otherwise Spec::decode decides, and auto takes decode for at most kDecodeMaxPackedRows
// packed rows (seqlen_q x the GQA group) against at least kDecodeMinKeys keys.
bool takes_decode(const Spec& spec, const ForwardArgs& args, std::string* why = nullptr);
inline constexpr int kDecodeMaxPackedRows = 64;
inline constexpr int kDecodeMinKeys = 256;

// The query rows of a GQA group for one (batch, kv head): seqlen_q * heads_q / heads_kv.
int decode_packed_rows(const ForwardArgs& args);

// The key splits this call allows for `split_plan` (the decode kernel's plan) on a GPU of
// `sm_count` multiprocessors, and the heuristic's among them (runtime/decode_splits.h): from
// its CTAs without splitting, the key tiles of the band its rows see, and the CTAs that read
// at once (a multiprocessor's, or one a multiprocessor where a second would not read faster).
KvSplitRange decode_kv_split_range(const gen::Plan& split_plan, const ForwardArgs& args,
                                   int sm_count);

// The partial O and LSE that `kv_splits` > 1 splits write for the combine (none for one).
std::vector<ScratchBuffer> decode_scratch(const Spec& spec, const ForwardArgs& args,
                                          int kv_splits);

// The launches' parameters; `workspace` holds decode_scratch's buffers in order.
DecParams make_dec_params(const Spec& spec, const ForwardArgs& args, int kv_splits,
                          void* workspace);

}  // namespace flashjit::rt
