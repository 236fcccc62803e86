// The argument checks every launch makes (forward, backward, merge): a check's message is
// formatted only when it fails. Formatting each message up front cost a decode call 1.5 us of
// host time on checks that pass (bench/NOTES.md entry 38).
#pragma once

#include <utility>

#include <fmt/format.h>

#include "flashjit/flashjit.h"

namespace flashjit::rt {

// Throws Error(Shape) "<operation>: <message>" unless `ok`.
template <class... Args>
void require_arg(bool ok, const char* operation, fmt::format_string<Args...> message,
                 Args&&... args) {
  if (ok) [[likely]]
    return;
  throw Error(ErrorKind::Shape,
              fmt::format("{}: {}", operation, fmt::format(message, std::forward<Args>(args)...)));
}

}  // namespace flashjit::rt
