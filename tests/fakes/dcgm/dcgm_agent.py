"""Fake ``dcgm_agent``: the flat API the exporter calls, with the real signatures and return
types (ctypes handles and ids, structures, status codes raised as DCGMError)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import dcgm_fields as F
import dcgm_structs as S
import fake_dcgm_engine


def _engine() -> fake_dcgm_engine.FakeHostEngine:
    return fake_dcgm_engine.ENGINE


def _key(handle: object) -> int:
    return int(getattr(handle, "value", handle))  # type: ignore[arg-type]


def dcgmInit() -> int:
    _engine().calls.append(("dcgmInit",))
    return S.DCGM_ST_OK


def dcgmShutdown() -> int:
    return S.DCGM_ST_OK


def dcgmStartEmbedded(opMode: int) -> ctypes.c_void_p:
    engine = _engine()
    engine.calls.append(("dcgmStartEmbedded", opMode))
    if not engine.root:
        raise S.DCGMError(S.DCGM_ST_REQUIRES_ROOT)
    engine.running = True
    return ctypes.c_void_p(engine.connect())


def dcgmStopEmbedded(dcgm_handle: object) -> int:
    _engine().calls.append(("dcgmStopEmbedded", _key(dcgm_handle)))
    return S.DCGM_ST_OK


def dcgmConnect_v2(ip_address: str, connectParams: S.c_dcgmConnectV2Params_v2,
                   version: int = S.c_dcgmConnectV2Params_version) -> ctypes.c_void_p:
    connectParams.version = version
    engine = _engine()
    engine.calls.append(("dcgmConnect_v2", ip_address, connectParams.addressIsUnixSocket,
                         connectParams.persistAfterDisconnect))
    return ctypes.c_void_p(engine.connect())


def dcgmConnect_v3(connection_string: str, connectParams: S.c_dcgmConnectV3Params_v1,
                   version: int = S.c_dcgmConnectV3Params_version) -> ctypes.c_void_p:
    connectParams.version = version
    engine = _engine()
    engine.calls.append(("dcgmConnect_v3", connection_string, connectParams.persistAfterDisconnect))
    if not connection_string.startswith(("tcp://", "unix://")):
        raise S.DCGMError(S.DCGM_ST_BADPARAM)
    return ctypes.c_void_p(engine.connect())


def dcgmDisconnect(dcgm_handle: object) -> int:
    engine = _engine()
    engine.calls.append(("dcgmDisconnect", _key(dcgm_handle)))
    engine.handles.pop(_key(dcgm_handle), None)
    return S.DCGM_ST_OK


def dcgmGetAllSupportedDevices(dcgm_handle: object) -> list[int]:
    engine = _engine()
    engine.check(dcgm_handle)
    return [g.gpu_id for g in engine.gpus]


def dcgmGetDeviceAttributes(dcgm_handle: object, gpuId: int,
                            version: int = S.dcgmDeviceAttributes_version3
                            ) -> S.c_dcgmDeviceAttributes_v3:
    engine = _engine()
    engine.check(dcgm_handle)
    attrs = S.c_dcgmDeviceAttributes_v3()
    attrs.version = version
    attrs.identifiers.uuid = engine.gpu(gpuId).uuid.encode()
    return attrs


def dcgmGroupCreate(dcgm_handle: object, type: int, groupName: str) -> ctypes.c_void_p:
    engine = _engine()
    engine.check(dcgm_handle)
    group = next(engine._ids)
    engine.groups[group] = []
    return ctypes.c_void_p(group)


def dcgmGroupDestroy(dcgm_handle: object, group_id: object) -> int:
    engine = _engine()
    engine.check(dcgm_handle)
    if engine.groups.pop(_key(group_id), None) is None:
        raise S.DCGMError(S.DCGM_ST_BADPARAM)
    engine.watches.pop(_key(group_id), None)
    return S.DCGM_ST_OK


def dcgmGroupAddEntity(dcgm_handle: object, group_id: object, entityGroupId: int,
                       entityId: int) -> int:
    engine = _engine()
    engine.check(dcgm_handle)
    engine.gpu(entityId)
    engine.groups[_key(group_id)].append((entityGroupId, entityId))
    return S.DCGM_ST_OK


def dcgmGroupAddDevice(dcgm_handle: object, group_id: object, gpu_id: int) -> int:
    return dcgmGroupAddEntity(dcgm_handle, group_id, F.DCGM_FE_GPU, gpu_id)


def dcgmFieldGroupCreate(dcgm_handle: object, fieldIds: Sequence[int],
                         fieldGroupName: str) -> ctypes.c_void_p:
    engine = _engine()
    engine.check(dcgm_handle)
    if any(name == fieldGroupName for name, _ in engine.field_groups.values()):
        raise S.DCGMError(S.DCGM_ST_DUPLICATE_KEY)
    fg = next(engine._ids)
    engine.field_groups[fg] = (fieldGroupName, tuple(fieldIds))
    return ctypes.c_void_p(fg)


def dcgmFieldGroupDestroy(dcgm_handle: object, fieldGroupId: object) -> int:
    engine = _engine()
    engine.check(dcgm_handle)
    engine.field_groups.pop(_key(fieldGroupId), None)
    return S.DCGM_ST_OK


def dcgmWatchFields(dcgm_handle: object, groupId: object, fieldGroupId: object,
                    updateFreq: int, maxKeepAge: float, maxKeepSamples: int) -> int:
    engine = _engine()
    engine.check(dcgm_handle)
    engine.calls.append(("dcgmWatchFields", _key(groupId),
                         engine.field_groups.get(_key(fieldGroupId), ("", ()))[1], updateFreq))
    engine.watch(_key(groupId), _key(fieldGroupId))
    return S.DCGM_ST_OK


def dcgmUnwatchFields(dcgm_handle: object, groupId: object, fieldGroupId: object) -> int:
    engine = _engine()
    engine.check(dcgm_handle)
    engine.watches.pop(_key(groupId), None)
    return S.DCGM_ST_OK


def dcgmEntitiesGetLatestValues(dcgmHandle: object, entities: Sequence[S.c_dcgmGroupEntityPair_t],
                                fieldIds: Sequence[int], flags: int) -> ctypes.Array:
    engine = _engine()
    engine.check(dcgmHandle)
    out = (S.c_dcgmFieldValue_v2 * (len(entities) * len(fieldIds)))()
    i = 0
    for entity in entities:
        for field_id in fieldIds:
            status, kind, value = engine.latest(int(entity.entityId), field_id)
            fv = out[i]
            fv.entityGroupId, fv.entityId = entity.entityGroupId, entity.entityId
            fv.fieldId = field_id
            fv.status, fv.fieldType, fv.ts = status, kind, engine.ts_us
            if kind == ord(F.DCGM_FT_INT64):
                fv.value.i64 = int(value)
            else:
                fv.value.dbl = float(value)
            i += 1
    return out
