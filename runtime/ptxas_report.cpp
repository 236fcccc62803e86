#include "runtime/ptxas_report.h"

#include <algorithm>
#include <array>
#include <regex>
#include <sstream>

namespace flashjit::rt {
namespace {

// The lines ptxas -v writes, e.g.
//   ptxas info    : Compiling entry function 'k' for 'sm_80'
//   ptxas info    : Function properties for k
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 8 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
const std::regex kEntry(R"(Compiling entry function '([^']+)')");
const std::regex kStack(R"((\d+) bytes stack frame)");
const std::regex kSpillStores(R"((\d+) bytes spill stores)");
const std::regex kSpillLoads(R"((\d+) bytes spill loads)");
const std::regex kRegisters(R"(Used (\d+) registers)");
const std::regex kSmem(R"((\d+) bytes smem)");

int number(const std::string& line, const std::regex& pattern) {
  std::smatch match;
  return std::regex_search(line, match, pattern) ? std::stoi(match[1].str()) : -1;
}

}  // namespace

bool PtxasReport::has_performance_warning() const {
  static constexpr std::array<const char*, 4> kCodes = {"C7508", "C7511", "C7517", "C7519"};
  return std::any_of(warnings.begin(), warnings.end(), [](const std::string& warning) {
    return std::any_of(kCodes.begin(), kCodes.end(), [&](const char* code) {
      return warning.find(code) != std::string::npos;
    });
  });
}

PtxasReport parse_ptxas_report(const std::string& log, const std::string& entry) {
  PtxasReport report;
  std::string compiling;  // entry function whose "Used N registers" line comes next
  bool entry_done = false;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (line.find("warning") != std::string::npos || line.find("Warning") != std::string::npos) {
      report.warnings.push_back(line);
      continue;
    }
    if (std::regex_search(line, match, kEntry)) {
      compiling = match[1].str();
      continue;
    }
    if (int stack = number(line, kStack); stack >= 0) {
      report.stack_bytes = std::max(report.stack_bytes, stack);
      report.spill_store_bytes += std::max(0, number(line, kSpillStores));
      report.spill_load_bytes += std::max(0, number(line, kSpillLoads));
      continue;
    }
    if (int registers = number(line, kRegisters); registers >= 0 && !entry_done &&
                                                  !compiling.empty() &&
                                                  (entry.empty() || compiling == entry)) {
      report.entry = compiling;
      report.registers = registers;
      report.static_shared_bytes = std::max(0, number(line, kSmem));
      entry_done = true;
    }
  }
  return report;
}

}  // namespace flashjit::rt
