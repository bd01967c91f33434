"""Fake ``dcgm_structs``: status codes, the DCGMError family and the structures the exporter
touches, with DCGM's names and values (see README.md in this directory)."""

from __future__ import annotations

import ctypes

DCGM_MAX_STR_LENGTH = 256
DCGM_OPERATION_MODE_AUTO = 1
DCGM_OPERATION_MODE_MANUAL = 2
DCGM_GROUP_DEFAULT = 0
DCGM_GROUP_EMPTY = 1
DCGM_FV_FLAG_LIVE_DATA = 0x1

DCGM_ST_OK = 0
DCGM_ST_BADPARAM = -1
DCGM_ST_GENERIC_ERROR = -3
DCGM_ST_NOT_SUPPORTED = -6
DCGM_ST_INIT_ERROR = -7
DCGM_ST_UNINITIALIZED = -10
DCGM_ST_TIMEOUT = -11
DCGM_ST_UNKNOWN_FIELD = -13
DCGM_ST_NO_DATA = -14
DCGM_ST_NOT_WATCHED = -16
DCGM_ST_NO_PERMISSION = -17
DCGM_ST_GPU_IS_LOST = -18
DCGM_ST_CONNECTION_NOT_VALID = -21
DCGM_ST_GPU_NOT_SUPPORTED = -22
DCGM_ST_GROUP_INCOMPATIBLE = -23
DCGM_ST_LIBRARY_NOT_FOUND = -25
DCGM_ST_DUPLICATE_KEY = -26
DCGM_ST_REQUIRES_ROOT = -29
DCGM_ST_MODULE_NOT_LOADED = -33
DCGM_ST_IN_USE = -34
DCGM_ST_PROFILING_NOT_SUPPORTED = -36
DCGM_ST_PROFILING_LIBRARY_ERROR = -37
DCGM_ST_PROFILING_MULTI_PASS = -38
DCGM_ST_PAUSED = -54

_TEXT = {
    DCGM_ST_NOT_SUPPORTED: "Feature not supported",
    DCGM_ST_CONNECTION_NOT_VALID: "The connection to the host engine is not valid any longer",
    DCGM_ST_REQUIRES_ROOT: "This operation is not supported when the host engine is running "
                           "as non root",
    DCGM_ST_MODULE_NOT_LOADED: "This request is serviced by a module of DCGM that is not "
                               "currently loaded",
    DCGM_ST_PROFILING_NOT_SUPPORTED: "Profiling is not supported for this group of GPUs or GPU",
    DCGM_ST_PROFILING_LIBRARY_ERROR: "The third-party Profiling module returned an "
                                     "unrecoverable error",
    DCGM_ST_PROFILING_MULTI_PASS: "The requested profiling metrics cannot be collected in a "
                                  "single pass",
    DCGM_ST_LIBRARY_NOT_FOUND: "DCGM library could not be found",
}


class DCGMError(Exception):
    """Like the real class: constructing DCGMError(code) yields the subclass for that code."""

    _valClassMapping: dict[int, type] = {}

    def __new__(cls, value: int):  # type: ignore[no-untyped-def]
        if cls is DCGMError:
            cls = DCGMError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        obj.info = None
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"DCGM Error with code {self.value}")


def _make_subclasses() -> None:
    for name, value in list(globals().items()):
        if name.startswith("DCGM_ST_") and value != DCGM_ST_OK:
            words = name.removeprefix("DCGM_ST_").split("_")
            cls_name = "DCGMError_" + "".join(w.capitalize() for w in words)
            sub = type(cls_name, (DCGMError,), {})
            globals()[cls_name] = sub
            DCGMError._valClassMapping[value] = sub


_make_subclasses()


def dcgmExceptionClass(error_code: int) -> type | None:
    return DCGMError._valClassMapping.get(error_code)


def _dcgmCheckReturn(ret: int) -> int:
    if ret != DCGM_ST_OK:
        raise DCGMError(ret)
    return ret


def _dcgmInit(libDcgmPath: str | None = None) -> None:
    import fake_dcgm_engine

    fake_dcgm_engine.ENGINE.calls.append(("_dcgmInit", libDcgmPath))
    if not fake_dcgm_engine.ENGINE.library_present:
        _dcgmCheckReturn(DCGM_ST_LIBRARY_NOT_FOUND)


class c_dcgmConnectV2Params_v2(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("persistAfterDisconnect", ctypes.c_uint),
        ("timeoutMs", ctypes.c_uint),
        ("addressIsUnixSocket", ctypes.c_uint),
    ]


c_dcgmConnectV2Params_version2 = (ctypes.sizeof(c_dcgmConnectV2Params_v2)) | (2 << 24)
c_dcgmConnectV2Params_version = c_dcgmConnectV2Params_version2


class c_dcgmConnectV3Params_v1(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("persistAfterDisconnect", ctypes.c_uint),
        ("timeoutMs", ctypes.c_uint),
    ]


c_dcgmConnectV3Params_version1 = (ctypes.sizeof(c_dcgmConnectV3Params_v1)) | (1 << 24)
c_dcgmConnectV3Params_version = c_dcgmConnectV3Params_version1


class c_dcgmGroupEntityPair_t(ctypes.Structure):
    _fields_ = [("entityGroupId", ctypes.c_uint32), ("entityId", ctypes.c_uint32)]


class c_dcgmFieldValue_v1_value(ctypes.Union):
    _fields_ = [
        ("i64", ctypes.c_int64),
        ("dbl", ctypes.c_double),
        ("str", ctypes.c_char * DCGM_MAX_STR_LENGTH),
    ]


class c_dcgmFieldValue_v2(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("entityGroupId", ctypes.c_uint),
        ("entityId", ctypes.c_uint),
        ("fieldId", ctypes.c_ushort),
        ("fieldType", ctypes.c_short),
        ("status", ctypes.c_int),
        ("unused", ctypes.c_uint),
        ("ts", ctypes.c_int64),
        ("value", c_dcgmFieldValue_v1_value),
    ]


class c_dcgmDeviceIdentifiers_v1(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("brandName", ctypes.c_char * DCGM_MAX_STR_LENGTH),
        ("deviceName", ctypes.c_char * DCGM_MAX_STR_LENGTH),
        ("pciBusId", ctypes.c_char * DCGM_MAX_STR_LENGTH),
        ("serial", ctypes.c_char * DCGM_MAX_STR_LENGTH),
        ("uuid", ctypes.c_char * DCGM_MAX_STR_LENGTH),
    ]


class c_dcgmDeviceAttributes_v3(ctypes.Structure):
    """Only ``identifiers`` of the real structure; the exporter reads nothing else."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("identifiers", c_dcgmDeviceIdentifiers_v1),
    ]


dcgmDeviceAttributes_version3 = ctypes.sizeof(c_dcgmDeviceAttributes_v3) | (3 << 24)
