#include "generator/element_types.h"

namespace flashjit::gen {
namespace {

constexpr ElementType kElementTypes[] = {
    {DType::F16, 2, "fj::Fp16", TmaDataType::Uint16, 16},
    {DType::BF16, 2, "fj::Bf16", TmaDataType::Uint16, 16},
};

}  // namespace

const ElementType& element_type(DType dtype) {
  for (const ElementType& e : kElementTypes)
    if (e.dtype == dtype) return e;
  throw Error(ErrorKind::Usage, "element type not in the table (generator/element_types.cpp)");
}

}  // namespace flashjit::gen
