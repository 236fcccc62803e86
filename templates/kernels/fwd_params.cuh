// Kernel parameters of the forward pass: the shared AttnParams and what only the forward
// reads. Compiled by the host compiler and by NVRTC, as attn/params.cuh.
#pragma once

#include "../attn/params.cuh"

struct FwdParams : AttnParams {
  // The sm90 kernel's persistent-grid tile counter (one int, zero between launches; the
  // kernel leaves it at zero). Unused by the sm80 kernel.
  int* tile_counter;
};
