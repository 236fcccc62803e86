// What each element type of a spec (DType) is to the generator, the runtime and the kernels:
// one row a type, so that a new type (fp8) is a row here plus its kernels, and no code
// elsewhere assumes two-byte elements.
#pragma once

#include "flashjit/flashjit.h"

namespace flashjit::gen {

// The element type a TMA tensor map is encoded with (runtime/driver.cpp maps it onto the
// driver's enum). TMA copies bits: a 16-bit float is loaded as UINT16.
enum class TmaDataType { Uint16 };

struct ElementType {
  DType dtype;
  int bytes;                // size of one element in global and shared memory
  const char* device_type;  // the templates' traits struct (templates/dtype.cuh)
  TmaDataType tma_type;
  int mma_k;                // the k of one tensor-core product (m16n8k16, wgmma k16)
};

const ElementType& element_type(DType dtype);

}  // namespace flashjit::gen
