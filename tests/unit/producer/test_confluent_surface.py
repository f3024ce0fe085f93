"""``HybridProducer`` behaves as confluent-kafka's ``Producer`` where an application can tell (issue 31).

No broker: no bootstrap server at all (librdkafka connects nowhere and reports no errors), so records stay
queued and time out, which is all these calls need.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException

from gateway import HybridProducer
from gateway.producer._compaction import CleanupPolicies
from gateway.producer._outbox import ExactProducer
from gateway.protocol.metadata import CommitEncoding
from tests.unit.fake_clock import ManualClock

NO_BROKER: dict[str, Any] = {"message.timeout.ms": 200}


def producer(**extra: Any) -> HybridProducer:
    return HybridProducer({**NO_BROKER, **extra})


def test_an_empty_producer_is_true_and_is_a_confluent_producer() -> None:
    p = producer()
    assert len(p) == 0 and bool(p) is True, "if producer: must not depend on the queue (confluent issue 1427)"
    assert isinstance(p, confluent_kafka.Producer)
    p.close()


def test_configured_as_confluent_is_with_a_dict_keywords_or_both() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test.confluent_surface")
    logger.addHandler(Keep())
    logger.setLevel(logging.DEBUG)
    with_logger = HybridProducer(dict(NO_BROKER), logger=logger, log_level=7, debug="conf,generic")
    with_logger.poll(0.3)  # librdkafka's log lines reach the logger once served
    with_logger.close()
    assert records, "librdkafka logged through the logger given as a keyword"
    keywords = HybridProducer(**NO_BROKER)
    assert keywords.settings.segment_bytes == 800_000
    keywords.close()
    overridden = HybridProducer(
        {**NO_BROKER, "max.message.segment.bytes": 500_000}, **{"max.message.segment.bytes": 600_000}
    )
    assert overridden.settings.segment_bytes == 600_000, "a keyword overrides the dict's key, as in confluent-kafka"
    overridden.close()


@pytest.mark.parametrize("args", [(None,), (), ("bootstrap.servers=x",), ([("a", "b")],)])
def test_a_missing_or_wrong_config_says_so_in_confluents_words(args: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError, match=r"^expected configuration dict$"):
        HybridProducer(*args)


@pytest.mark.skipif(
    tuple(int(x) for x in confluent_kafka.version()[0].split(".")[:2]) < (2, 16),
    reason="confluent-kafka's own Producer.poll() without a timeout keeps waiting after serving a report before 2.16",
)
def test_poll_without_a_timeout_blocks_until_a_report_is_served() -> None:
    p = producer()
    reports: list[Any] = []
    p.produce("t", b"v", callback=lambda err, msg: reports.append(err))
    started = time.monotonic()
    served = p.poll()  # confluent-kafka's default: -1, wait (here until the record times out)
    assert served == 1 and reports and reports[0].code() == KafkaError._MSG_TIMED_OUT
    assert time.monotonic() - started >= 0.1
    p.close()


def test_produce_batch_takes_callback_and_marks_a_bad_message_instead_of_raising() -> None:
    p = producer()
    reports: list[Any] = []
    messages: list[dict[str, Any]] = [{"value": b"a"}, {"value": b"b", "partition": -2}, {"value": b"c"}]
    assert p.produce_batch("t", messages, callback=lambda err, msg: reports.append(msg)) == 2
    assert "_error" not in messages[0] and "_error" not in messages[2]
    error = messages[1]["_error"]
    assert isinstance(error, KafkaError) and error.code() == KafkaError._INVALID_ARG and "partition" in error.str()
    assert len(p) == 2
    p.flush(2)
    assert len(reports) == 2, "each queued message's callback is called once"
    p.close()


@pytest.mark.parametrize(
    ("batch", "says"),
    [
        ([{"value": b"ok"}, "not a dict"], "Message at index 1 must be a dict"),
        ([{"value": b"ok"}, {"value": 123}], "Message value at index 1 must be bytes or str"),
        ([{"value": b"ok"}, {"key": ["k"]}], "Message key at index 1 must be bytes or str"),
        ([{"value": b"ok"}, {"partition": "0"}], "Message partition at index 1 must be int"),
    ],
)
def test_a_malformed_batch_raises_before_anything_is_queued(batch: list[Any], says: str) -> None:
    p = producer()
    with pytest.raises(TypeError, match=says):
        p.produce_batch("t", batch)
    assert len(p) == 0, "the good message before the bad one was not queued"
    p.close()


def test_the_admin_client_is_opened_with_the_producer_and_only_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opened at construction (librdkafka connects in the background), so a first large message waits
    for one DescribeConfigs, not for a connection too; nothing else opens another."""
    import confluent_kafka.admin

    made: list[dict[str, Any]] = []

    class CountingAdmin:
        def __init__(self, conf: dict[str, Any]) -> None:
            made.append(conf)

        def describe_configs(self, *args: Any, **kwargs: Any) -> Any:
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "DescribeConfigs denied"))

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", CountingAdmin)
    p = producer(**{"max.message.segment.bytes": 1_000})
    assert len(made) == 1, "the admin client is made with the producer"
    p.produce("t", b"small")
    p.produce("t", b"x" * 5_000)  # several segments: the topic's cleanup.policy is asked now
    assert len(made) == 1
    assert p.metrics()["chunked.messages"] == 1, "without DescribeConfigs the topic counts as not compacted"
    p.close()
    unchecked = producer(**{"max.message.segment.bytes": 1_000, "large.message.compaction.check": False})
    unchecked.produce("t", b"x" * 5_000)
    assert len(made) == 1, "with the check off no admin client is ever made"
    unchecked.close()


def test_a_denied_describe_counts_as_not_compacted_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    def denied(topic: str) -> str:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "DescribeConfigs denied"))

    policies = CleanupPolicies(denied, ManualClock().clock(), refresh_s=60)
    with caplog.at_level(logging.WARNING, logger="gateway.producer._compaction"):
        assert not policies.compacted("t") and not policies.compacted("t")
    assert len(caplog.records) == 1 and "TOPIC_AUTHORIZATION_FAILED" in caplog.text


def test_a_producer_with_a_commit_metadata_encoding_makes_its_admin_client_without_it() -> None:
    """The key is the gateway's (its transaction offsets' metadata); librdkafka's admin client refuses it."""
    for encoding in CommitEncoding:
        p = producer(**{"commit.metadata.encoding": encoding.value})
        exact = p.inner
        assert isinstance(exact, ExactProducer) and exact._commit_encoding is encoding, "transactions write it so"
        p.close()


def test_the_cleanup_policy_lookup_never_calls_the_applications_error_cb() -> None:
    from gateway.producer._compaction import AdminDescriber

    def error_cb(err: Any) -> None:
        raise AssertionError(err)

    describer = AdminDescriber({"bootstrap.servers": "127.0.0.1:1", "error_cb": error_cb, "stats_cb": print})
    assert "error_cb" not in describer._conf and "stats_cb" not in describer._conf
    assert describer._conf["bootstrap.servers"] == "127.0.0.1:1"


def test_produce_takes_positional_arguments_in_confluents_order_and_in_the_apis() -> None:
    import inspect

    ours = list(inspect.signature(HybridProducer.produce).parameters)[1:6]
    assert ours == ["topic", "value", "key", "partition", "positional"]
    p = producer()
    p.produce("t", b"v", b"k", 0, None, None, 1_700_000_000_000)  # confluent-kafka: the 7th is the timestamp
    p.produce("t", b"v", b"k", 0, None, 1_700_000_000_000, [("h", b"1")])  # API.md: the 6th, then headers
    assert len(p) == 2
    with pytest.raises(TypeError, match="at most 8 positional"):
        p.produce("t", b"v", b"k", 0, None, None, 0, None, "extra")
    with pytest.raises(TypeError, match="multiple values for argument 'timestamp'"):
        p.produce("t", b"v", b"k", 0, None, 5, timestamp=6)
    p.close()
