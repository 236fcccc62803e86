#include "generator/templates.h"

#include <fmt/format.h>

#include "flashjit/flashjit.h"

namespace flashjit::gen {

std::string_view template_text(std::string_view name) {
  for (const auto& t : embedded_templates())
    if (t.name == name) return t.text;
  throw Error(ErrorKind::Usage, fmt::format("template '{}' is not embedded in this build of "
                                            "flashjit (templates/ changed without a rebuild?)",
                                            name));
}

}  // namespace flashjit::gen
