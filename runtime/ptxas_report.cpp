#include "runtime/ptxas_report.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "flashjit/flashjit.h"

namespace flashjit::rt {
namespace {

// The lines ptxas -v writes, e.g.
//   ptxas info    : Compiling entry function 'k' for 'sm_80'
//   ptxas info    : Function properties for k
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 8 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
// Matched with plain searches: libstdc++'s std::regex recurses once per character and
// overflowed the stack on a long line of a cached log.
constexpr std::string_view kEntry = "Compiling entry function '";
constexpr std::string_view kStack = " bytes stack frame";
constexpr std::string_view kSpillStores = " bytes spill stores";
constexpr std::string_view kSpillLoads = " bytes spill loads";
constexpr std::string_view kRegistersBefore = "Used ";
constexpr std::string_view kRegistersAfter = " registers";
constexpr std::string_view kSmem = " bytes smem";

Error bad_number(std::string_view digits) {
  return Error(ErrorKind::Io, fmt::format("ptxas report: the number {}{} does not fit an int",
                                          digits.substr(0, 20), digits.size() > 20 ? "..." : ""));
}

int to_int(std::string_view digits) {
  int value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size()) throw bad_number(digits);
  return value;
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// The number written right before `suffix` ("N bytes stack frame"), if the line has one.
std::optional<int> number_before(std::string_view line, std::string_view suffix) {
  for (size_t at = line.find(suffix); at != std::string_view::npos;
       at = line.find(suffix, at + 1)) {
    size_t start = at;
    while (start > 0 && is_digit(line[start - 1])) --start;
    if (start < at) return to_int(line.substr(start, at - start));
  }
  return std::nullopt;
}

// The number between `before` and `after` ("Used N registers"), if the line has one.
std::optional<int> number_between(std::string_view line, std::string_view before,
                                  std::string_view after) {
  for (size_t at = line.find(before); at != std::string_view::npos;
       at = line.find(before, at + 1)) {
    const size_t start = at + before.size();
    size_t end = start;
    while (end < line.size() && is_digit(line[end])) ++end;
    if (end > start && line.substr(end, after.size()) == after)
      return to_int(line.substr(start, end - start));
  }
  return std::nullopt;
}

// The name in "Compiling entry function 'NAME'", if the line has one.
std::optional<std::string_view> entry_name(std::string_view line) {
  const size_t at = line.find(kEntry);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t start = at + kEntry.size();
  const size_t end = line.find('\'', start);
  if (end == std::string_view::npos || end == start) return std::nullopt;
  return line.substr(start, end - start);
}

// `total + more`, refused past int: a forged log must not overflow the sum.
int add(int total, int more) {
  int sum = 0;
  if (__builtin_add_overflow(total, more, &sum))
    throw Error(ErrorKind::Io, "ptxas report: the spill bytes add up past an int");
  return sum;
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
  for (size_t start = 0; start < log.size();) {
    const size_t end = std::min(log.find('\n', start), log.size());
    const std::string_view line = std::string_view(log).substr(start, end - start);
    start = end + 1;
    if (line.find("warning") != std::string_view::npos ||
        line.find("Warning") != std::string_view::npos) {
      report.warnings.emplace_back(line);
      continue;
    }
    if (const auto name = entry_name(line)) {
      compiling = *name;
      continue;
    }
    if (const auto stack = number_before(line, kStack)) {
      report.stack_bytes = std::max(report.stack_bytes, *stack);
      report.spill_store_bytes = add(report.spill_store_bytes,
                                     number_before(line, kSpillStores).value_or(0));
      report.spill_load_bytes = add(report.spill_load_bytes,
                                    number_before(line, kSpillLoads).value_or(0));
      continue;
    }
    const auto registers = number_between(line, kRegistersBefore, kRegistersAfter);
    if (registers && !entry_done && !compiling.empty() && (entry.empty() || compiling == entry)) {
      report.entry = compiling;
      report.registers = *registers;
      report.static_shared_bytes = number_before(line, kSmem).value_or(0);
      entry_done = true;
    }
  }
  return report;
}

}  // namespace flashjit::rt
