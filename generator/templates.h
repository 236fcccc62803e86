// The CUDA templates (templates/<layer>/<file>.cuh), embedded into the library at build time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace flashjit::gen {

struct EmbeddedTemplate {
  std::string name;  // the path under templates/, e.g. "kernels/fwd_sm80.cuh"
  std::string text;
};

// Defined in the file cmake/embed_templates.cmake generates.
const std::vector<EmbeddedTemplate>& embedded_templates();

// The text of one template; throws Error(Usage) if it is not embedded.
std::string_view template_text(std::string_view name);

// The template that `#include "path"` in template `from` names: path is relative to from's
// folder, as a compiler reads it ("kernels/fwd_sm80.cuh" including "../arch/sm80.cuh" names
// "arch/sm80.cuh"). Throws Error(Usage) for a path that leaves templates/.
std::string included_template_name(std::string_view from, std::string_view path);

}  // namespace flashjit::gen
