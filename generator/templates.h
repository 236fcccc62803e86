// The CUDA templates (templates/*.cuh), embedded into the library at build time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace flashjit::gen {

struct EmbeddedTemplate {
  std::string name;  // file name, e.g. "fwd_sm80.cuh"
  std::string text;
};

// Defined in the file cmake/embed_templates.cmake generates.
const std::vector<EmbeddedTemplate>& embedded_templates();

// The text of one template; throws Error(Internal-ish Usage) if it is not embedded.
std::string_view template_text(std::string_view name);

}  // namespace flashjit::gen
