// embed_attention: attention with head dim 100 (which the big libraries refuse) through
// flashjit, checked against a small CPU reference. Built with EMBED_PREBUILT (the default),
// its kernels are embedded in this binary by flashjit_add_kernels and no compiler runs:
// RuntimeOptions::require_prebuilt makes any kernel missing from the bundle an error.
//
// Exit status: 0 correct, 1 wrong results, 2 error, 3 no GPU (after the kernels were found).
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <flashjit/flashjit.h>

namespace {

constexpr int kBatch = 2, kHeadsQ = 4, kHeadsKv = 2, kSeqQ = 300, kSeqK = 257, kHeadDim = 100;

// bf16 is the top half of an fp32; round to nearest even when narrowing.
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}
float from_bf16(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// Must match hd100.yaml field for field: the bundle is looked up by the kernel this spec plans.
flashjit::Spec make_spec() {
  flashjit::Spec spec;
  spec.name = "hd100";
  spec.head_dim_qk = spec.head_dim_v = kHeadDim;
  spec.dtype = flashjit::DType::BF16;
  spec.causal = false;
  return spec;
}

// O = softmax(Q K^T / sqrt(d)) V in double, on the bf16 values, packed FlashAttention layout.
std::vector<double> reference(const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                              const std::vector<uint16_t>& v) {
  std::vector<double> out(static_cast<size_t>(kBatch) * kSeqQ * kHeadsQ * kHeadDim);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  std::vector<double> scores(kSeqK);
  for (int b = 0; b < kBatch; ++b)
    for (int h = 0; h < kHeadsQ; ++h) {
      const int hk = h / (kHeadsQ / kHeadsKv);  // grouped-query attention
      for (int i = 0; i < kSeqQ; ++i) {
        const size_t qrow = ((static_cast<size_t>(b) * kSeqQ + i) * kHeadsQ + h) * kHeadDim;
        double max_score = -INFINITY;
        for (int j = 0; j < kSeqK; ++j) {
          const size_t krow = ((static_cast<size_t>(b) * kSeqK + j) * kHeadsKv + hk) * kHeadDim;
          double dot = 0;
          for (int d = 0; d < kHeadDim; ++d) dot += from_bf16(q[qrow + d]) * from_bf16(k[krow + d]);
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - max_score));
        for (int d = 0; d < kHeadDim; ++d) {
          double acc = 0;
          for (int j = 0; j < kSeqK; ++j) {
            acc += scores[j] * from_bf16(v[((static_cast<size_t>(b) * kSeqK + j) * kHeadsKv + hk) *
                                               kHeadDim + d]);
          }
          out[qrow + d] = acc / sum;
        }
      }
    }
  return out;
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw flashjit::Error(flashjit::ErrorKind::Driver,
                          std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// Device copy of a host vector, freed at scope exit.
struct DeviceArray {
  void* ptr = nullptr;
  explicit DeviceArray(size_t bytes, const void* host = nullptr) {
    check_cuda(cudaMalloc(&ptr, bytes), "cudaMalloc");
    if (host) check_cuda(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceArray() { cudaFree(ptr); }
};

std::vector<uint16_t> random_bf16(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> out(count);
  for (uint16_t& x : out) x = to_bf16(normal(rng));
  return out;
}

int run(bool allow_jit) {
  flashjit::RuntimeOptions options;
  options.require_prebuilt = !allow_jit;
  flashjit::Runtime runtime(options);
  const flashjit::Spec spec = make_spec();

#ifdef EMBED_PREBUILT_ARCHS
  // Needs no GPU: proves the embedded bundle serves every target it was built for.
  std::stringstream archs(EMBED_PREBUILT_ARCHS);
  for (std::string target; std::getline(archs, target, ',');) {
    const flashjit::CompileReport report = runtime.compile(spec, target);
    std::printf("%s for %s: from the embedded bundle (%d registers, %d bytes spilled)\n",
                report.kernel_name.c_str(), target.c_str(), report.registers,
                report.spill_store_bytes);
  }
#endif
  if (!runtime.has_device()) {
    std::printf("no GPU: %s\n", "the CUDA driver or a GPU is missing; nothing to launch");
    return 3;
  }
  check_cuda(cudaFree(nullptr), "CUDA initialisation");  // so the timing below is flashjit's

  std::mt19937 rng(std::random_device{}());
  const auto q = random_bf16(static_cast<size_t>(kBatch) * kSeqQ * kHeadsQ * kHeadDim, rng);
  const auto k = random_bf16(static_cast<size_t>(kBatch) * kSeqK * kHeadsKv * kHeadDim, rng);
  const auto v = random_bf16(static_cast<size_t>(kBatch) * kSeqK * kHeadsKv * kHeadDim, rng);
  DeviceArray dq(q.size() * 2, q.data()), dk(k.size() * 2, k.data()), dv(v.size() * 2, v.data());
  DeviceArray dout(q.size() * 2);

  flashjit::ForwardArgs args =
      flashjit::ForwardArgs::contiguous(spec, kBatch, kHeadsQ, kHeadsKv, kSeqQ, kSeqK);
  args.q = dq.ptr;
  args.k = dk.ptr;
  args.v = dv.ptr;
  args.o = dout.ptr;

  // The first call finds the kernel (bundle, else disk cache, else NVRTC), loads and runs it.
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<flashjit::Kernel> kernel = runtime.kernel(spec);
  kernel->forward(args);
  check_cuda(cudaDeviceSynchronize(), "attention kernel");
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("first call: %.2f ms (kernel lookup, module load, launch, completion)\n", first_ms);

  std::vector<uint16_t> out(q.size());
  check_cuda(cudaMemcpy(out.data(), dout.ptr, out.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
  const std::vector<double> expected = reference(q, k, v);
  double max_error = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    max_error = std::max(max_error, std::abs(from_bf16(out[i]) - expected[i]));
  }
  // bf16 output: 8 mantissa bits on values of magnitude <= ~3.
  const double tolerance = 2e-2;
  std::printf("max |O - reference| = %.3g (tolerance %.3g): %s\n", max_error, tolerance,
              max_error <= tolerance ? "correct" : "WRONG");
  return max_error <= tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef EMBED_PREBUILT_ARCHS
  const bool allow_jit = argc > 1 && std::strcmp(argv[1], "--allow-jit") == 0;
#else
  const bool allow_jit = true;  // built without a bundle: the JIT is the only source
  (void)argc, (void)argv;
#endif
  try {
    return run(allow_jit);
  } catch (const flashjit::Error& error) {
    std::fprintf(stderr, "embed_attention: %s error: %s\n", flashjit::to_string(error.kind()),
                 error.what());
    return error.kind() == flashjit::ErrorKind::NoDevice ? 3 : 2;
  }
}
