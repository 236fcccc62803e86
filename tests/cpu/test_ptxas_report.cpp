// The ptxas -v report NVRTC leaves in its program log: registers, spills, stack, warnings.
#include <string>

#include <doctest/doctest.h>

#include "flashjit/flashjit.h"
#include "runtime/ptxas_report.h"

using flashjit::rt::parse_ptxas_report;

// Logs as NVRTC 13.0 writes them (captured from real compiles).
static const char* kCleanLog = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 4.066 ms
)";

static const char* kSpillingLog = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
ptxas         .     1160 bytes stack frame, 1868 bytes spill stores, 2488 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 1160 bytes cumulative stack size, 1024 bytes smem
ptxas info    : Compile time = 256.972 ms
)";

TEST_CASE("ptxas report: a clean kernel") {
  const auto report = parse_ptxas_report(kCleanLog);
  CHECK(report.entry == "k");
  CHECK(report.registers == 8);
  CHECK(report.static_shared_bytes == 0);
  CHECK(report.spill_store_bytes == 0);
  CHECK(report.spill_load_bytes == 0);
  CHECK(report.stack_bytes == 0);
  CHECK(report.warnings.empty());
  CHECK_FALSE(report.has_performance_warning());
}

TEST_CASE("ptxas report: spills, stack and static shared memory") {
  const auto report = parse_ptxas_report(kSpillingLog, "k");
  CHECK(report.registers == 32);
  CHECK(report.static_shared_bytes == 1024);
  CHECK(report.spill_store_bytes == 1868);
  CHECK(report.spill_load_bytes == 2488);
  CHECK(report.stack_bytes == 1160);
}

TEST_CASE("ptxas report: several functions; spills of a callee count, the entry is picked") {
  const std::string log = R"(ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
ptxas         .     48 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function 'other' for 'sm_80'
ptxas info    : Function properties for other
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compiling entry function 'fa_fwd' for 'sm_80'
ptxas info    : Function properties for fa_fwd
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 8 bytes cumulative stack size, 2048 bytes smem, 400 bytes cmem[0]
)";
  const auto report = parse_ptxas_report(log, "fa_fwd");
  CHECK(report.entry == "fa_fwd");
  CHECK(report.registers == 255);
  CHECK(report.static_shared_bytes == 2048);
  CHECK(report.spill_store_bytes == 20);
  CHECK(report.spill_load_bytes == 12);
  CHECK(report.stack_bytes == 48);
  CHECK(parse_ptxas_report(log).entry == "other");  // no name: the first entry
}

TEST_CASE("ptxas report: warnings are kept; the performance codes are recognised") {
  const std::string log = std::string(kCleanLog) +
                          "ptxas warning : (C7508) Potential Performance Loss: setmaxnreg "
                          "ignored to maintain minimum register requirements.\n";
  const auto report = parse_ptxas_report(log);
  REQUIRE(report.warnings.size() == 1);
  CHECK(report.warnings[0].find("C7508") != std::string::npos);
  CHECK(report.has_performance_warning());
  CHECK(report.registers == 8);

  const auto benign = parse_ptxas_report(std::string(kCleanLog) +
                                         "fa.cu(12): warning #177-D: variable \"x\" was declared "
                                         "but never referenced\n");
  CHECK(benign.warnings.size() == 1);
  CHECK_FALSE(benign.has_performance_warning());
  for (const char* code : {"C7511", "C7517", "C7519"}) {
    CHECK(parse_ptxas_report(std::string("ptxas warning : (") + code + ") wgmma serialized\n")
              .has_performance_warning());
  }
}

TEST_CASE("ptxas report: an empty log is all zeros") {
  const auto report = parse_ptxas_report("");
  CHECK(report.entry.empty());
  CHECK(report.registers == 0);
  CHECK(report.spill_store_bytes == 0);
  CHECK(report.warnings.empty());
}

TEST_CASE("ptxas report: a forged log is read in bounded stack, its numbers checked") {
  // std::regex (the parser before this one) overflowed the stack on a long line of a
  // cached log, so every compile of that kernel crashed instead of missing the cache.
  const std::string name(1 << 20, 'k');
  const auto report = parse_ptxas_report("ptxas info    : Compiling entry function '" + name +
                                         "' for 'sm_80'\nptxas info    : Used 12 registers\n");
  CHECK(report.entry == name);
  CHECK(report.registers == 12);
  CHECK(parse_ptxas_report(std::string(1 << 20, '9') + " bytes stack\n").stack_bytes == 0);

  CHECK_THROWS_WITH_AS(parse_ptxas_report("ptxas .  99999999999 bytes stack frame\n"),
                       doctest::Contains("the number 99999999999 does not fit an int"),
                       flashjit::Error);
  const std::string spills = "ptxas .  0 bytes stack frame, 2147483647 bytes spill stores\n";
  CHECK_THROWS_WITH_AS(parse_ptxas_report(spills + spills), doctest::Contains("past an int"),
                       flashjit::Error);
}
