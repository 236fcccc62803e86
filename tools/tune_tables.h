// What `flashjit tune` prints: the tune DB's entries (`--show`) and a tuning run's results,
// one table for the forward's tiles, one for the backward's and one for decode's key splits.
#pragma once

#include <vector>

#include "autotune/backward_tuner.h"
#include "autotune/decode_tuner.h"
#include "autotune/tuner.h"
#include "runtime/tune_db.h"

namespace flashjit::cli {

void print_db(const tune::TuneDb& db);
void print_results(const std::vector<tune::SpecTuneResult>& results);
void print_results(const std::vector<tune::BackwardTuneResult>& results);
void print_results(const std::vector<tune::DecodeTuneResult>& results);

}  // namespace flashjit::cli
