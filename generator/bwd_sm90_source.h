// What the backward's sm90 paths share: their wgmma shapes and an extern "C" entry taking the
// parameters and the tensor maps of Q, K, V and dO.
#pragma once

#include <string>
#include <vector>

#include "generator/plan.h"

namespace flashjit::gen {

// The Wgmma<N> specialisations for each distinct N of `shapes` (N past 256 as its chunks).
std::string bwd_sm90_wgmma_source(const Plan& plan, const std::vector<int>& shapes);
// The entry of a 384-thread kernel calling the device function template `function`.
std::string bwd_sm90_entry(const Plan& plan, const char* function);

}  // namespace flashjit::gen
