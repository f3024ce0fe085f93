"""The delivery callback that closes a message's audit: ``produce`` and ``produce_stream`` share it.

Both count a message the same way (its ATTEMPT when it is taken, then SUCCESS or FAILURE in the
same time bucket from its delivery report), so that producer and consumer audits compare whichever
call sent it.
"""

from __future__ import annotations

from typing import Any

from gateway.auditing import Auditor, AuditType
from gateway.core.outgoing import DeliveryCallback, OutgoingMessage


def audited(auditor: Auditor, message: OutgoingMessage) -> DeliveryCallback:
    """``message``'s callback, recording SUCCESS or FAILURE in the audit bucket its ATTEMPT went to first."""
    on_delivery = message.on_delivery
    topic, timestamp, size = message.topic, message.timestamp, message.key_size + message.size

    def report(err: Any, msg: Any) -> None:
        auditor.record(topic, timestamp, 1, size, AuditType.FAILURE if err is not None else AuditType.SUCCESS)
        if on_delivery is not None:
            on_delivery(err, msg)

    return report
