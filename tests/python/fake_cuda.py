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


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ExchangeHeader(ctypes.Structure):
    pass


_ExchangeHeader._fields_ = [("version", _DLPackVersion),
                            ("prev_api", ctypes.POINTER(_ExchangeHeader))]
_DESCRIBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_DLTensor))
_CURRENT_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32,
                                   ctypes.POINTER(ctypes.c_void_p))


class _ExchangeAPI(ctypes.Structure):
    _fields_ = [("header", _ExchangeHeader), ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", _DESCRIBE),
                ("current_work_stream", _CURRENT_STREAM)]


def exchange_framework(refuse=False, strides=True, stream=0x5EED):
    """A class of fake CUDA arrays that also have DLPack's C exchange API (a type attribute
    __dlpack_c_exchange_api__, as torch.Tensor has), its functions written with ctypes.
    Each call makes a new framework (its own API table). `refuse`: the producer fails to
    describe its arrays; `strides=False`: it leaves their strides out; `stream`: the current
    stream it names. The class counts `described` arrays and records `stream_queries`."""

    class FakeExchangeArray(FakeCudaArray):
        described = 0
        stream_queries = []

        def exported(self):
            """How many DLPack capsules this array made (the capsule path's reads)."""
            return len(self._tensors)

    def describe(address, out):
        if refuse:
            return -1
        array = ctypes.cast(address, ctypes.py_object).value
        code, bits = DTYPES[array.dtype]
        out[0] = _DLTensor(array._address, KDL_CUDA, array._device, len(array.shape), code, bits,
                           1, array._shape, array._strides if strides else None, 0)
        FakeExchangeArray.described += 1
        return 0

    def current_stream(device_type, device_id, out):
        FakeExchangeArray.stream_queries.append((device_type, device_id))
        out[0] = stream
        return 0

    api = _ExchangeAPI()
    api.header.version.major, api.header.version.minor = 1, 3
    api.dltensor_from_py_object_no_sync = _DESCRIBE(describe)
    api.current_work_stream = _CURRENT_STREAM(current_stream)
    FakeExchangeArray._api = api  # the table (and its callbacks) live as long as the class
    FakeExchangeArray.__dlpack_c_exchange_api__ = _capsule_new(
        ctypes.addressof(api), b"dlpack_exchange_api", None)
    return FakeExchangeArray
