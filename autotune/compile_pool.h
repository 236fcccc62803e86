// Candidates compiling on CPU threads, in order, while the caller times those already built:
// what both tile tuners (the forward's and the backward's) run their compiles through.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "flashjit/flashjit.h"

namespace flashjit::tune {

struct CompileOutcome {
  std::vector<CompileReport> reports;  // of each kernel the candidate adds
  std::string error;                   // "" when it compiled
};

// Spilled bytes over a candidate's kernels (stores and loads).
int spilled_bytes(const CompileOutcome& outcome);
// "168 registers, 73728 B shared, 812 ms", a kernel's report for a progress line, several
// joined by " | ".
std::string describe(const CompileOutcome& outcome);

class CompilePool {
 public:
  // Candidate i's kernels, compiled (or found in a cache).
  using Compile = std::function<std::vector<CompileReport>(size_t i)>;

  // Compiles candidates 0..count-1 on `threads` threads, in order.
  CompilePool(size_t count, Compile compile, unsigned threads);
  ~CompilePool() { stop(); }  // threads_ (declared last) join first

  // Candidate i's outcome, once compiled; an exception `compile` threw is its error.
  CompileOutcome wait(size_t i) { return futures_[i].get(); }
  // Leaves the candidates not started yet.
  void stop() { stop_ = true; }

 private:
  std::vector<std::promise<CompileOutcome>> promises_;
  std::vector<std::future<CompileOutcome>> futures_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::jthread> threads_;
};

// `threads`, or every hardware thread when it is 0.
unsigned compile_threads(unsigned threads);

}  // namespace flashjit::tune
