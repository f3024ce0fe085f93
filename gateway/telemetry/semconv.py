"""OpenTelemetry messaging semantic conventions: which attribute names, decided once per client.

The conventions renamed several attributes (semconv 1.24 -> 1.26/1.27). As OpenTelemetry's own
instrumentations do during such a transition, ``OTEL_SEMCONV_STABILITY_OPT_IN`` chooses:
unset, the older names; ``messaging``, the newer ones only; ``messaging/dup``, both. It is read
when a client is built (:meth:`ClientInfo.of`), never per message. Names the two versions share
(``messaging.system``, ``messaging.destination.name``, ``messaging.kafka.message.key``, ...) are
always written once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"

# meaning -> (older name, newer name)
RENAMED: Mapping[str, tuple[str, str]] = {
    "partition": ("messaging.kafka.destination.partition", "messaging.destination.partition.id"),
    "offset": ("messaging.kafka.message.offset", "messaging.kafka.offset"),
    "group": ("messaging.kafka.consumer.group", "messaging.consumer.group.name"),
    "client_id": ("messaging.client_id", "messaging.client.id"),
}
_OLD_OPERATION = {"send": "publish", "process": "process"}


@dataclass(frozen=True, slots=True)
class Names:
    """Which generation of names to write: ``old``, ``new`` or both."""

    old: bool = True
    new: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Names:
        env = os.environ if environ is None else environ
        tokens = {t.strip().lower() for t in env.get(OPT_IN_ENV, "").split(",")}
        if "messaging/dup" in tokens:
            return cls(old=True, new=True)
        if "messaging" in tokens:
            return cls(old=False, new=True)
        return cls()

    def put(self, attrs: dict[str, Any], meaning: str, value: Any) -> None:
        """``value`` under the older and/or the newer name of ``meaning`` (partition ids are strings in the new)."""
        if value is None:
            return
        old, new = RENAMED[meaning]
        if self.old:
            attrs[old] = value
        if self.new:
            attrs[new] = str(value) if meaning == "partition" else value

    def operation(self, attrs: dict[str, Any], operation: str) -> None:
        """``send`` or ``process``: ``messaging.operation`` (old: ``publish``) or ``.name`` and ``.type``."""
        if self.old:
            attrs["messaging.operation"] = _OLD_OPERATION[operation]
        if self.new:
            attrs["messaging.operation.name"] = operation
            attrs["messaging.operation.type"] = operation

    def span_name(self, operation: str, topic: str) -> str:
        """``send orders`` (new) or ``orders publish`` (old); both generations: the new one."""
        return f"{operation} {topic}" if self.new else f"{topic} {_OLD_OPERATION[operation]}"


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """What every span and metric point of one client carries: its ids and its first broker."""

    client_id: str
    group: str | None
    address: str | None
    port: int | None
    names: Names

    @classmethod
    def of(cls, conf: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> ClientInfo:
        address, port = first_broker(str(conf.get("bootstrap.servers") or conf.get("metadata.broker.list") or ""))
        group = conf.get("group.id")
        return cls(
            client_id=str(conf.get("client.id") or "rdkafka"),  # librdkafka's default client.id
            group=None if group is None else str(group),
            address=address,
            port=port,
            names=Names.from_env(environ),
        )

    def common(self, topic: str, operation: str) -> dict[str, Any]:
        """The attributes every span of this client starts with."""
        attrs: dict[str, Any] = {"messaging.system": "kafka", "messaging.destination.name": topic}
        self.names.operation(attrs, operation)
        self.names.put(attrs, "client_id", self.client_id)
        if operation == "process":
            self.names.put(attrs, "group", self.group)
        if self.address is not None:
            attrs["server.address"] = self.address
            if self.port is not None:
                attrs["server.port"] = self.port
        return attrs

    def metric_attributes(self, topic: str, operation: str, error_type: str | None = None) -> dict[str, Any]:
        """Attributes of a messaging metric point: the newer names, which is what the metrics were defined with."""
        attrs: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.name": operation,
            "messaging.destination.name": topic,
        }
        if operation != "send" and self.group is not None:
            attrs["messaging.consumer.group.name"] = self.group
        if self.address is not None:
            attrs["server.address"] = self.address
            if self.port is not None:
                attrs["server.port"] = self.port
        if error_type is not None:
            attrs["error.type"] = error_type
        return attrs


def first_broker(servers: str) -> tuple[str | None, int | None]:
    """``server.address`` and ``server.port`` of the first bootstrap server (``[::1]:9092`` and ``SSL://h:1`` too)."""
    entry = servers.split(",")[0].strip()
    if "://" in entry:
        entry = entry.split("://", 1)[1]
    if not entry:
        return None, None
    if entry.startswith("["):  # [ipv6]:port
        host, _, rest = entry[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, _, port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
    return host or None, int(port) if port.isdigit() else None


def message_key(key: Any) -> str | None:
    """``messaging.kafka.message.key``: the key when it has one canonical string form (UTF-8), else left out."""
    if key is None:
        return None
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray, memoryview)):
        try:
            return bytes(key).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def error_type(err: Any) -> str:
    """``error.type``: a KafkaError's name (``_MSG_TIMED_OUT``), else the exception's class name."""
    name = getattr(err, "name", None)
    if callable(name):
        try:
            return str(name())
        except Exception:  # noqa: BLE001 - an error object that cannot name itself is still an error
            pass
    inner = getattr(err, "args", None)
    if inner and hasattr(inner[0], "name") and callable(inner[0].name):  # KafkaException(KafkaError)
        return str(inner[0].name())
    return type(err).__qualname__
