// `flashjit check SPEC.yaml...`: parse and validate specs, print each resolved spec.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/command.h"

namespace flashjit::cli {

Command add_check_command(CLI::App& parent) {
  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* app = parent.add_subcommand(
      "check", "Validate specs and print them resolved (every field, defaults filled in)");
  app->add_option("specs", *files, "spec files (YAML)")->required()->check(CLI::ExistingFile);
  return {app, [files] {
            int code = kOk;
            for (const std::string& file : *files) {
              try {
                const Spec spec = Spec::from_file(file);
                if (files->size() > 1) fmt::print("# {}\n", file);
                fmt::print("{}", spec.to_yaml());
              } catch (const Error& error) {
                code = std::max(code, report_error(error));
              }
            }
            return code;
          }};
}

}  // namespace flashjit::cli
