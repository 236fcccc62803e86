// `flashjit run --inputs DIR / --outputs DIR`: the user's q.npy, k.npy, v.npy (and do.npy for
// --backward) ([batch, seqlen, heads, head_dim], float16 or float32) in, o.npy and lse.npy
// (or dq.npy, dk.npy, dv.npy) (float32) out.
#pragma once

#include <string>

#include "flashjit/flashjit.h"
#include "verify/attention_run.h"
#include "verify/backward_run.h"

namespace flashjit::cli {

struct LoadedInputs {
  verify::Shape shape;
  verify::UserInputs values;  // rounded to the spec's dtype
};

// Reads DIR/{q,k,v}.npy; throws Error(Shape) naming the file and dimension that does not fit
// the spec or the other arrays, Error(Io) for unreadable files.
LoadedInputs load_npy_inputs(const std::string& dir, const Spec& spec);
// Reads DIR/do.npy into inputs.values.d_o; it must have O's shape [batch, seqlen_q, heads_q,
// head_dim_v] (q.npy's first three dimensions).
void load_npy_output_gradient(const std::string& dir, const Spec& spec, LoadedInputs& inputs);

// Writes DIR/o.npy [batch, seqlen_q, heads_q, head_dim_v] and DIR/lse.npy
// [batch, heads_q, seqlen_q], both float32.
void write_npy_outputs(const std::string& dir, const Spec& spec, const verify::Shape& shape,
                       const verify::RunResult& result);
// Writes DIR/dq.npy, dk.npy and dv.npy in Q's, K's and V's shapes, float32.
void write_npy_gradients(const std::string& dir, const Spec& spec, const verify::Shape& shape,
                         const verify::BackwardRunResult& result);

}  // namespace flashjit::cli
