#include "generator/templates.h"

#include <fmt/format.h>

#include <filesystem>

#include "flashjit/flashjit.h"

namespace flashjit::gen {

std::string_view template_text(std::string_view name) {
  for (const auto& t : embedded_templates())
    if (t.name == name) return t.text;
  throw Error(ErrorKind::Usage, fmt::format("template '{}' is not embedded in this build of "
                                            "flashjit (templates/ changed without a rebuild?)",
                                            name));
}

std::string included_template_name(std::string_view from, std::string_view path) {
  namespace fs = std::filesystem;
  const fs::path relative(path);
  const std::string name =
      (fs::path(from).parent_path() / relative).lexically_normal().generic_string();
  if (relative.is_absolute() || name == ".." || name.starts_with("../"))
    throw Error(ErrorKind::Usage, fmt::format("templates/{} includes \"{}\", which is outside "
                                              "templates/",
                                              from, path));
  return name;
}

}  // namespace flashjit::gen
