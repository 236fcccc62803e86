"""Arrays that say through DLPack they are CUDA memory, for the CPU tests of the argument
checks: their data pointer is never dereferenced, since every check runs before a launch
and no launch happens without a GPU."""
import ctypes

KDL_CUDA = 2
DTYPES = {"float16": (2, 16), "bfloat16": (4, 16), "float32": (2, 32), "int32": (0, 32)}


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeCudaArray:
    """A DLPack producer of a [shape] array on cuda:`device` with row-major strides unless
    `strides` (in elements) are given."""

    def __init__(self, shape, dtype="float16", strides=None, device=0, address=1 << 40):
        self.shape = tuple(shape)
        self.dtype = dtype
        if strides is None:
            strides, step = [], 1
            for extent in reversed(self.shape):
                strides.insert(0, step)
                step *= extent
        self._shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        self._strides = (ctypes.c_int64 * len(self.shape))(*strides)
        self._device = device
        self._address = address
        self._tensors = []  # each export's struct lives as long as this array

    def __dlpack_device__(self):
        return (KDL_CUDA, self._device)

    def __dlpack__(self, **_):
        code, bits = DTYPES[self.dtype]
        managed = _DLManagedTensor()
        managed.dl_tensor = _DLTensor(self._address, KDL_CUDA, self._device, len(self.shape),
                                      code, bits, 1, self._shape, self._strides, 0)
        self._tensors.append(managed)
        return _capsule_new(ctypes.addressof(managed), b"dltensor", None)
