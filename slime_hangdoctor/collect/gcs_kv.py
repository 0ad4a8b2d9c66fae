"""One read of a Ray GCS's internal KV over gRPC, without importing Ray.

`ray.core.generated.gcs_service_pb2` imports the whole `ray` package (0.4-0.5 s on a quiet 2-core
node, over a second under load) for one KV lookup. This asks the same question with what Ray
itself depends on: grpc's generic unary call on the method's path
(`/ray.rpc.InternalKVGcsService/InternalKVGet`), and the request and reply messages built by
protobuf's own runtime (`proto_builder`) in a private descriptor pool, from the fields of Ray's
`InternalKVGetRequest {bytes key = 1; bytes namespace = 2;}` and `InternalKVGetReply {GcsStatus
status = 1; bytes value = 2;}` (src/ray/protobuf/gcs_service.proto). The reply's `status` is read
as bytes (a message and a bytes field share protobuf's wire type), then as `GcsStatus {int32 code
= 1; string message = 2;}`. tests/unit/test_collect_gcs_kv.py holds these fields against the
installed Ray's generated classes, so a change of Ray's protocol fails a test, not a user's run.

`import grpc` and protobuf's runtime cost ~0.1-0.15 s together here (benchmarks.bench_startup's
import table): paid only by an address that names a GCS, in the resolver's own thread.
"""

from __future__ import annotations

import enum
import functools
import importlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

KV_GET_METHOD = "/ray.rpc.InternalKVGcsService/InternalKVGet"
# The largest reply read: the dashboard's address is a few dozen bytes.
MAX_REPLY_BYTES = 64 * 1024


class GcsFailure(enum.Enum):
    """Why a KV read gave no value (the caller words it; it never reads an error's text)."""

    NO_GRPC = "no_grpc"  # grpc or protobuf cannot be imported here
    TIMEOUT = "timeout"
    NOT_GCS = "not_gcs"  # something else answered (an HTTP/1 server)
    UNAUTHENTICATED = "unauthenticated"  # the GCS wants (another) token
    UNREACHABLE = "unreachable"
    EMPTY = "empty"  # the GCS answered: no such key
    OTHER = "other"


@dataclass(frozen=True)
class KvAnswer:
    """A value, or why there is none (`failure` with a short detail)."""

    value: bytes | None
    failure: GcsFailure | None = None
    detail: str = ""


@functools.cache
def _messages() -> tuple[Any, Any, Any]:
    """(request, reply, status) message classes, built once by protobuf's runtime."""
    from google.protobuf import descriptor_pb2, descriptor_pool, proto_builder

    types = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()  # private: never clashes with Ray's own ray.rpc names

    def message(name: str, *fields: tuple[str, int]) -> Any:
        # an OrderedDict keeps the order: field numbers 1, 2, ... as listed
        return proto_builder.MakeSimpleProtoClass(
            OrderedDict(fields), full_name=f"slime_hangdoctor.gcs.{name}", pool=pool
        )

    request = message("KvGetRequest", ("key", types.TYPE_BYTES), ("namespace", types.TYPE_BYTES))
    reply = message("KvGetReply", ("status", types.TYPE_BYTES), ("value", types.TYPE_BYTES))
    status = message("GcsStatus", ("code", types.TYPE_INT32), ("message", types.TYPE_STRING))
    return request, reply, status


def request_bytes(key: bytes, namespace: bytes) -> bytes:
    """The wire bytes of Ray's `InternalKVGetRequest(key=key, namespace=namespace)`."""
    request, _, _ = _messages()
    data: bytes = request(key=key, namespace=namespace).SerializeToString()
    return data


def parse_reply(data: bytes) -> KvAnswer:
    """A KV reply's value, or EMPTY with the GCS's status; a reply that is not one is OTHER."""
    from google.protobuf.message import DecodeError

    _, reply, status = _messages()
    try:
        got = reply.FromString(data)
        state = status.FromString(got.status)
    except DecodeError:
        return KvAnswer(None, GcsFailure.OTHER, "the reply is not a KV answer")
    if got.value:
        return KvAnswer(bytes(got.value))
    return KvAnswer(None, GcsFailure.EMPTY, f"status {state.code} {state.message[:120]}".strip())


def kv_get(
    address: str, key: bytes, namespace: bytes, *, token: str | None, timeout: float
) -> KvAnswer:
    """Ask the GCS at `address` (host:port) for one KV value, within `timeout` seconds in all;
    never raises. The token goes as Ray's clients send it (`authorization: Bearer ...`)."""
    try:
        grpc: Any = importlib.import_module("grpc")
        body = request_bytes(key, namespace)
    except ImportError as exc:
        return KvAnswer(None, GcsFailure.NO_GRPC, str(exc)[:160])
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    channel = grpc.insecure_channel(
        address,
        options=(
            ("grpc.enable_http_proxy", 0),  # as every other read of ours: no proxy
            ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
            ("grpc.enable_retries", 0),
        ),
    )
    try:
        call = channel.unary_unary(KV_GET_METHOD)  # no (de)serialiser: bytes in, bytes out
        data = call(body, timeout=max(0.05, timeout), metadata=metadata)
    except grpc.RpcError as exc:
        return _rpc_failure(exc)
    except Exception as exc:  # noqa: BLE001 - any other failure of the channel is an answer
        return KvAnswer(None, GcsFailure.OTHER, f"{type(exc).__name__}: {exc}"[:160])
    finally:
        channel.close()
    if not isinstance(data, bytes):
        return KvAnswer(None, GcsFailure.OTHER, "the reply is not bytes")
    return parse_reply(data)


def _rpc_failure(exc: Any) -> KvAnswer:
    code = getattr(exc, "code", lambda: None)()
    details = str(getattr(exc, "details", lambda: "")() or "")
    name = str(getattr(code, "name", code))
    if name == "DEADLINE_EXCEEDED":
        return KvAnswer(None, GcsFailure.TIMEOUT, details[:160])
    if name == "UNAUTHENTICATED":
        return KvAnswer(None, GcsFailure.UNAUTHENTICATED, details[:160])
    lowered = details.lower()
    if "http1" in lowered or "http/2" in lowered or "http2" in lowered:
        return KvAnswer(None, GcsFailure.NOT_GCS, details[:160])
    if name == "UNAVAILABLE":
        return KvAnswer(None, GcsFailure.UNREACHABLE, details[:160])
    return KvAnswer(None, GcsFailure.OTHER, f"gRPC {name}: {details[:160]}")
