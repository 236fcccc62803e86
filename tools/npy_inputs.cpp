#include "tools/npy_inputs.h"

#include <climits>
#include <filesystem>

#include <fmt/format.h>

#include "verify/half.h"
#include "verify/npy.h"

namespace flashjit::cli {

namespace {

constexpr const char* kDimNames[4] = {"batch", "seqlen", "heads", "head_dim"};

struct Loaded {
  std::string path;
  verify::NpyArray array;
};

Loaded load(const std::string& dir, const char* name) {
  Loaded loaded{(std::filesystem::path(dir) / name).string(), {}};
  loaded.array = verify::read_npy(loaded.path);
  const auto& shape = loaded.array.shape;
  if (shape.size() != 4)
    throw Error(ErrorKind::Shape,
                fmt::format("{}: shape {} has {} dimensions, expected 4: [batch, seqlen, heads, "
                            "head_dim]",
                            loaded.path, verify::shape_string(shape), shape.size()));
  for (int d = 0; d < 4; ++d)
    if (shape[d] < 1 || shape[d] > INT_MAX)
      throw Error(ErrorKind::Shape, fmt::format("{}: {} (dimension {}) is {}", loaded.path,
                                                kDimNames[d], d, shape[d]));
  return loaded;
}

// Dimension `dim` of `a` must equal `want` (taken from `source`).
void expect_dim(const Loaded& a, int dim, int64_t want, const std::string& source) {
  if (a.array.shape[dim] != want)
    throw Error(ErrorKind::Shape,
                fmt::format("{}: {} (dimension {}) is {} but {} is {}", a.path, kDimNames[dim],
                            dim, a.array.shape[dim], source, want));
}

std::vector<float> rounded(DType dtype, std::vector<float> values) {
  for (float& v : values) v = verify::round_to(dtype, v);
  return values;
}

}  // namespace

LoadedInputs load_npy_inputs(const std::string& dir, const Spec& spec) {
  const Loaded q = load(dir, "q.npy");
  const Loaded k = load(dir, "k.npy");
  const Loaded v = load(dir, "v.npy");
  expect_dim(q, 3, spec.head_dim_qk, "the spec's head_dim_qk");
  expect_dim(k, 3, spec.head_dim_qk, "the spec's head_dim_qk");
  expect_dim(v, 3, spec.head_dim_v, "the spec's head_dim_v");
  expect_dim(k, 0, q.array.shape[0], "batch of " + q.path);
  expect_dim(v, 0, q.array.shape[0], "batch of " + q.path);
  expect_dim(v, 1, k.array.shape[1], "seqlen of " + k.path);
  expect_dim(v, 2, k.array.shape[2], "heads of " + k.path);
  if (q.array.shape[2] % k.array.shape[2] != 0)
    throw Error(ErrorKind::Shape,
                fmt::format("{}: heads (dimension 2) is {}, not a multiple of the {} heads of {}",
                            q.path, q.array.shape[2], k.array.shape[2], k.path));

  LoadedInputs in;
  in.shape.batch = static_cast<int>(q.array.shape[0]);
  in.shape.seqlen_q = static_cast<int>(q.array.shape[1]);
  in.shape.heads_q = static_cast<int>(q.array.shape[2]);
  in.shape.seqlen_k = static_cast<int>(k.array.shape[1]);
  in.shape.heads_kv = static_cast<int>(k.array.shape[2]);
  in.values.q = rounded(spec.dtype, q.array.values);
  in.values.k = rounded(spec.dtype, k.array.values);
  in.values.v = rounded(spec.dtype, v.array.values);
  return in;
}

void load_npy_output_gradient(const std::string& dir, const Spec& spec, LoadedInputs& inputs) {
  const Loaded d_o = load(dir, "do.npy");
  const verify::Shape& shape = inputs.shape;
  const std::string q_path = (std::filesystem::path(dir) / "q.npy").string();
  expect_dim(d_o, 0, shape.batch, "batch of " + q_path);
  expect_dim(d_o, 1, shape.seqlen_q, "seqlen of " + q_path);
  expect_dim(d_o, 2, shape.heads_q, "heads of " + q_path);
  expect_dim(d_o, 3, spec.head_dim_v, "the spec's head_dim_v");
  inputs.values.d_o = rounded(spec.dtype, d_o.array.values);
}

void write_npy_outputs(const std::string& dir, const Spec& spec, const verify::Shape& shape,
                       const verify::RunResult& result) {
  std::filesystem::create_directories(dir);
  const int64_t o_shape[4] = {shape.batch, shape.seqlen_q, shape.heads_q, spec.head_dim_v};
  const int64_t lse_shape[3] = {shape.batch, shape.heads_q, shape.seqlen_q};
  verify::write_npy_f32((std::filesystem::path(dir) / "o.npy").string(), o_shape,
                        result.o_values);
  verify::write_npy_f32((std::filesystem::path(dir) / "lse.npy").string(), lse_shape,
                        result.lse_values);
}

void write_npy_gradients(const std::string& dir, const Spec& spec, const verify::Shape& shape,
                         const verify::BackwardRunResult& result) {
  std::filesystem::create_directories(dir);
  const int64_t q_shape[4] = {shape.batch, shape.seqlen_q, shape.heads_q, spec.head_dim_qk};
  const int64_t k_shape[4] = {shape.batch, shape.seqlen_k, shape.heads_kv, spec.head_dim_qk};
  const int64_t v_shape[4] = {shape.batch, shape.seqlen_k, shape.heads_kv, spec.head_dim_v};
  const auto path = [&](const char* name) { return (std::filesystem::path(dir) / name).string(); };
  verify::write_npy_f32(path("dq.npy"), q_shape, result.dq_values);
  verify::write_npy_f32(path("dk.npy"), k_shape, result.dk_values);
  verify::write_npy_f32(path("dv.npy"), v_shape, result.dv_values);
}

}  // namespace flashjit::cli
