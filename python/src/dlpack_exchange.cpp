#include "python/src/dlpack_exchange.h"

namespace nb = nanobind;

namespace flashjit::py {

const DLPackExchangeAPI* exchange_api_of(nb::handle object) {
  // Interned once and kept: the lookup runs for every tensor of every call.
  static PyObject* const name = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
  PyObject* capsule = PyObject_GetAttr(reinterpret_cast<PyObject*>(Py_TYPE(object.ptr())), name);
  if (capsule == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  void* pointer = PyCapsule_CheckExact(capsule)
                      ? PyCapsule_GetPointer(capsule, "dlpack_exchange_api")
                      : nullptr;
  Py_DECREF(capsule);  // the table itself lives as long as the process (DLPack's rule)
  if (pointer == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  // A newer table links the older ones; flashjit reads the layout of major version 1.
  auto* header = static_cast<const DLPackExchangeAPIHeader*>(pointer);
  while (header != nullptr && header->version.major != 1) header = header->prev_api;
  const auto* api = reinterpret_cast<const DLPackExchangeAPI*>(header);
  if (api == nullptr || api->dltensor_from_py_object_no_sync == nullptr ||
      api->current_work_stream == nullptr)
    return nullptr;
  return api;
}

}  // namespace flashjit::py
