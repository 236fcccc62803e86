// The GPU test grid (issue 2): every head dim 1..512 of interest, qk != v pairs, seqlens
// {1, 17, 128, 1000, 4097} with seqlen_q != seqlen_k both ways, causal and not, fp16 and
// bf16, GQA and MQA, strided (padded-head and packed-QKV) views. Specs are built in C++.
#pragma once

#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "verify/attention_run.h"

namespace flashjit::gpu_test {

struct GridCase {
  Spec spec;
  verify::Shape shape;
};

// A spec named grid_qk<dqk>_v<dv>_<dtype>[_causal], validated, and a shape: the case lists'
// building blocks.
Spec make_spec(int dqk, int dv, DType dtype, bool causal);
verify::Shape shape(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
                    verify::Layout layout = verify::Layout::Contiguous);

// Two specs per head-dim pair: one causal, one not, with opposite dtypes (alternating
// between pairs), so each dim sees both dtypes and both mask modes across the grid.
std::vector<Spec> grid_specs();

// Small and medium shapes for every spec (GQA, MQA, seqlen_q < / > seqlen_k, decode).
std::vector<GridCase> small_cases();
// seqlen 4097 against 4097, 1000 and 1 for a few dims (batch 1, one head: the fp64
// reference of 4097 x 4097 x 512 is the expensive part of the suite).
std::vector<GridCase> long_cases();
// Q/K/V/O with padded head strides or as views into one packed QKV tensor, which also
// exercises the 8-, 4- and 2-byte aligned kernel variants.
std::vector<GridCase> strided_cases();

// Sliding-window specs (several bands, causal and not) and their cases: band edges inside
// key blocks, empty bands, many skipped blocks, decoding.
std::vector<Spec> window_specs();
std::vector<GridCase> window_cases();

// Block-sparse specs (several block sizes, kernel tiles smaller than and equal to the mask
// blocks) and their cases (tests/gpu/mask_cases.cpp): random layouts per batch and head and
// broadcast ones, query blocks that see nothing, sequence ends inside blocks, decoding.
std::vector<Spec> block_sparse_specs();
std::vector<GridCase> block_sparse_cases();
// One spec per compiled-in pattern kind and parameter regime, causal and not, and its cases.
std::vector<Spec> pattern_specs();
std::vector<GridCase> pattern_cases();
// Variable-length batches (cu_seqlens): sequences of odd lengths, 0 and 1 included, for
// unmasked, causal, sliding-window, block-sparse and pattern specs.
std::vector<GridCase> varlen_cases();

// "bf16 causal qk=100 v=100 | b=2 hq=6 hkv=2 sq=17 sk=128 contiguous" for the log.
std::string describe(const GridCase& c);

}  // namespace flashjit::gpu_test
