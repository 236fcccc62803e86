// CompileReports as Python dicts with the keys of their one JSON view
// (runtime/compile_report_json.h: what `flashjit compile --json` prints), so scripts read one
// set of names whichever way they compiled.
#pragma once

#include <vector>

#include <nanobind/nanobind.h>

#include "flashjit/flashjit.h"

namespace flashjit::py {

nanobind::dict report_dict(const CompileReport& report);
nanobind::list report_list(const std::vector<CompileReport>& reports);

}  // namespace flashjit::py
