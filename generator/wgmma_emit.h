// The wgmma instructions of the sm90 kernel, written out for exactly the N it uses: each is
// one inline-asm statement with N/2 accumulator operands, which templates cannot spell.
#pragma once

#include <string>

#include "flashjit/flashjit.h"

namespace flashjit::gen {

// `template <> struct fj::Wgmma<n>` (see templates/arch/sm90.cuh) for 16-bit inputs of `dtype`
// and fp32 accumulators: ss() with both operands K-major in shared memory, rs() with A from
// registers and B MN-major in shared memory. n: a multiple of 8 from 8 to 256.
std::string emit_wgmma(DType dtype, int n);

}  // namespace flashjit::gen
