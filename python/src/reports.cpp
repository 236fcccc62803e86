#include "python/src/reports.h"

#include <string>

#include <nanobind/stl/string.h>

#include "runtime/compile_report_json.h"

namespace nb = nanobind;

namespace flashjit::py {

nb::dict report_dict(const CompileReport& report) {
  nb::object loads = nb::module_::import_("json").attr("loads");  // cached in sys.modules
  return nb::borrow<nb::dict>(loads(rt::compile_report_json(report).dump()));
}

nb::list report_list(const std::vector<CompileReport>& reports) {
  nb::list out;
  for (const CompileReport& report : reports) out.append(report_dict(report));
  return out;
}

}  // namespace flashjit::py
