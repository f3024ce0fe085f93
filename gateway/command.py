"""How the ``gateway`` command fails: one line on stderr and an exit code, never a traceback.

An operator runs these commands from scripts and cron jobs. A traceback there hides the one fact
that matters (which broker, which bucket, which argument), and a command killed by a signal must
still stop the servers it started and remove their folders, or every failed run leaks processes.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn, Protocol

from gateway.settings.stores import COMMAND_CREDENTIALS

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_INCOMPLETE, EXIT_UNKNOWN_TOPIC, EXIT_MISSING_EXTRA, EXIT_REFUSED = 4, 5, 6, 7
EXIT_AB_MOVED = 8

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILED: "the work failed or found problems",
    EXIT_USAGE: "bad arguments or settings (a flag, --kafka-option, --command-config)",
    EXIT_UNREACHABLE: "Kafka or a store unreachable or refusing the credentials (the line names which)",
    EXIT_INCOMPLETE: "some kept for lack of proof (run again once the reason is gone)",
    EXIT_UNKNOWN_TOPIC: "a topic named on the command line does not exist",
    EXIT_MISSING_EXTRA: "a package the command needs is not installed (the line names the extra to install)",
    EXIT_REFUSED: "--delete refused: the prefix holds objects of topics not named (name them or their mirrors)",
    EXIT_AB_MOVED: "bench --against: a median moved outside the other side's spread (the table flags which)",
}
"""Every exit code of ``gateway``, one row each: the one table the help, docs/cli.md and the tests read.

Scripts and cron jobs branch on these codes, so a code means the same in every subcommand; a
subcommand says what 0 and 1 mean to it (:data:`COMMAND_EXIT_STATUSES`). 128 + N: ended by signal N.
"""

#: The meanings every subcommand shares; each adds what 0 and 1 (and any code of its own) mean to it.
COMMON_EXIT_STATUSES = {code: EXIT_CODES[code] for code in (EXIT_USAGE, EXIT_UNREACHABLE, EXIT_MISSING_EXTRA)}

COMMAND_EXIT_STATUSES: dict[str, dict[int, str]] = {
    "gc": {
        EXIT_OK: "every pending write decided (and, with --delete, acted on)",
        EXIT_FAILED: "a store operation failed",
        EXIT_INCOMPLETE: EXIT_CODES[EXIT_INCOMPLETE],
    },
    "reconcile": {
        EXIT_OK: "nothing dangling or broken",
        EXIT_FAILED: "dangling or broken envelopes found, or a deletion failed",
        EXIT_INCOMPLETE: "some kept for lack of proof, e.g. a transaction still open (run again once it ended)",
        EXIT_UNKNOWN_TOPIC: EXIT_CODES[EXIT_UNKNOWN_TOPIC],
        EXIT_REFUSED: EXIT_CODES[EXIT_REFUSED],
    },
    "demo": {EXIT_OK: "every stage verified", EXIT_FAILED: "a message or row did not verify"},
    "bench": {
        EXIT_OK: "measured and written (with --against: no median moved)",
        EXIT_FAILED: "a measurement failed",
        EXIT_AB_MOVED: EXIT_CODES[EXIT_AB_MOVED],
    },
}
"""What each subcommand's own codes mean; the rest of its ``Exit status:`` sentence is :data:`COMMON_EXIT_STATUSES`."""

SIGNAL_TEXT = "128+N ended by signal N (130 Ctrl-C, 143 SIGTERM)"


def exit_status_text(statuses: dict[int, str]) -> str:
    """The ``Exit status:`` sentence of a command's help, built from the one table its code returns by.

    Scripts branch on these codes, so the help and the docs must list every code a command can return;
    ``tests/unit/test_cli_exit_statuses.py`` holds the docs to the same sentence.
    """
    merged = {**statuses, **COMMON_EXIT_STATUSES}
    listed = "; ".join(f"{code} {merged[code]}" for code in sorted(merged))
    return f"Exit status: {listed}; {SIGNAL_TEXT}."


class CommandError(Exception):
    """A failure the command reports as one line with its exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (``gateway demo: error: ...``) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


COMMANDS_GROUP = "gateway.commands"
"""The entry-point group of the subcommands a package adds to ``gateway`` (``demo``, ``bench``)."""


class Command(Protocol):
    """A ``gateway`` subcommand declared as an entry point in :data:`COMMANDS_GROUP`.

    Its module is imported when the command line is built, so it imports no more than argparse needs;
    ``run`` imports the rest.
    """

    help: str
    description: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def size_argument(text: str) -> int:
    """Accepts 1000, 1_000, 10KB, 4MB, 1GiB."""
    units = {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "b": 1}
    raw = text.strip().lower().replace("_", "")
    try:
        for suffix, factor in units.items():
            if raw.endswith(suffix):
                return int(float(raw[: -len(suffix)]) * factor)
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 1000, 10KB, 4MB, 1GiB)") from None


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    raise CommandError(message, code)


@contextmanager
def signals_unwind(caught: list[int]) -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``SystemExit`` so every ``with`` block runs its clean-up on the way out.

    Each signal is also appended to ``caught``: a clean-up that raises on the way out replaces the
    ``SystemExit``, and the command must still end as a terminated one (128 + the signal).
    """

    def unwind(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, unwind) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def kafka_logger() -> logging.Logger:
    """librdkafka's own log lines go through Python logging (``gateway.kafka``) instead of raw stderr."""
    return logging.getLogger("gateway.kafka")


def probe_kafka(
    bootstrap: str, client_config: dict[str, Any] | None = None, timeout: float = 5.0, topics: Sequence[str] = ()
) -> None:
    """Fail within ``timeout`` seconds, in one line, when no broker answers metadata at ``bootstrap``,
    or when one of ``topics`` does not exist (a typo would otherwise surface as Spark's data-loss error)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from gateway.librdkafka.refusals import AUTHENTICATION_CODES, ConnectionRefusals

    refusals = ConnectionRefusals()
    conf = {**(client_config or {}), "bootstrap.servers": bootstrap, "logger": _probe_logger(), "error_cb": refusals,
            "socket.connection.setup.timeout.ms": int(timeout * 1000)}  # fmt: skip
    try:
        admin = AdminClient(conf)
    except KafkaException as exc:  # librdkafka refused a key or value before any connection: the user's to fix
        fail(f"the Kafka client settings are refused: {exc.args[0].str()}", EXIT_USAGE)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        err = refusals.explain(admin, exc).args[0]
        if err.code() in AUTHENTICATION_CODES:  # a wrong password is not a network problem: say which it is
            fail(f"Kafka at {bootstrap} refused the client's credentials: {err.str()}", EXIT_UNREACHABLE)
        fail(f"cannot reach Kafka at {bootstrap} within {timeout:.0f} s: {err.str()}", EXIT_UNREACHABLE)
    if not metadata.brokers:
        fail(f"Kafka at {bootstrap} answered with no brokers", EXIT_UNREACHABLE)
    missing = sorted(set(topics) - set(metadata.topics))
    if missing:
        named = ", ".join(map(repr, missing))
        fail(f"Kafka at {bootstrap} has no topic {named} (or these credentials cannot describe it)", EXIT_UNKNOWN_TOPIC)


def _probe_logger() -> logging.Logger:
    """Where the probe's librdkafka log lines go: nowhere, since its failure is the one line they would repeat.

    Serving the probe's error reports (to name a refused password) also serves the log lines queued
    with them, a dozen ``SASL authentication error`` lines on stderr before the one that matters.
    """
    quiet = logging.getLogger("gateway.kafka.probe")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
    return quiet


def check_bucket(client: Any, bucket: str, where: str) -> None:
    """One line when the store's bucket is missing or unreachable, before any work depends on it."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        status = str(exc.response.get("Error", {}).get("Code", ""))
        if status in ("404", "NoSuchBucket", "NotFound"):
            fail(f"S3 bucket {bucket!r} does not exist at {where}")
        fail(f"S3 bucket {bucket!r} at {where}: {status or exc}")
    except BotoCoreError as exc:
        fail(f"cannot reach S3 at {where} for bucket {bucket!r}: {exc}", EXIT_UNREACHABLE)


def check_container(store: Any) -> None:
    """One line when a GCS bucket or Azure container is missing or unreachable, before any work depends on it."""
    from gateway.errors import StoreError, StoreUnavailableError

    where = f"{store.scheme}://{store.bucket}/{store.prefix}"
    try:
        next(iter(store.list_locators()), None)
    except StoreUnavailableError as exc:
        fail(f"cannot reach {where}: {exc}", EXIT_UNREACHABLE)
    except StoreError as exc:
        fail(f"{where}: {exc}")


STORE_SETTINGS = tuple(setting.key for setting in COMMAND_CREDENTIALS)
"""Store settings a ``--command-config`` file or the environment may hold; every other key is a Kafka setting
(declared in :mod:`gateway.settings.stores`)."""

ENV_PREFIX = "GATEWAY_"
"""``GATEWAY_KAFKA_SASL_PASSWORD`` is ``sasl.password``; ``GATEWAY_REDIS_PASSWORD`` is ``redis.password``."""


def read_properties(path: str) -> dict[str, str]:
    """A Java properties file as Kafka's tools read ``--command-config``: ``key=value`` or ``key: value``
    lines, ``#`` and ``!`` comments. A file other users can read is used with a warning."""
    try:
        mode = os.stat(path).st_mode
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        fail(f"cannot read --command-config {path!r}: {exc.strerror or type(exc).__name__}", EXIT_USAGE)
    if mode & 0o077:
        logging.getLogger("gateway.command").warning(
            "--command-config %s can be read by other users (mode %o); it holds credentials", path, mode & 0o777
        )
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith(("#", "!")):
            continue
        cut = min((i for i in (text.find("="), text.find(":")) if i > 0), default=-1)
        if cut < 0:
            fail(f"--command-config {path!r} line {number}: expected key=value", EXIT_USAGE)
        out[text[:cut].strip()] = text[cut + 1 :].strip()
    return out


def client_settings(
    command_config: str | None, argv_options: dict[str, str], environ: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """Kafka client settings and store credentials, from the environment, then the file, then argv (later wins).

    Secrets belong in the file or the environment: a command line is visible to every user of the
    machine (``ps``, ``/proc/<pid>/cmdline``).
    """
    env = os.environ if environ is None else environ
    merged: dict[str, str] = {}
    for name, value in env.items():
        if name.startswith(ENV_PREFIX + "KAFKA_"):
            merged[name[len(ENV_PREFIX) + 6 :].lower().replace("_", ".")] = value
        elif name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX) :].lower().replace("_", ".") in STORE_SETTINGS:
            merged[name[len(ENV_PREFIX) :].lower().replace("_", ".")] = value
    if command_config:
        merged.update(read_properties(command_config))
    merged.update(argv_options)
    stores = {key: merged.pop(key) for key in STORE_SETTINGS if key in merged}
    return merged, stores


def run(prog: str, action: Callable[[], int]) -> int:
    """Run a subcommand: its own errors, and any library, Kafka, Redis or S3 error, become one line.

    ``GATEWAY_DEBUG=1`` lets the traceback through, for bug reports.
    """
    logging.basicConfig(level=logging.WARNING, format=f"{prog}: %(levelname)s %(name)s: %(message)s")
    caught: list[int] = []
    try:
        with signals_unwind(caught):
            return action()
    except CommandError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 128 + caught[0] if caught else exc.code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # every other failure: one line, the type names the component
        if os.environ.get("GATEWAY_DEBUG"):
            raise
        text = " ".join(str(exc).split()) or "(no message)"
        print(f"{prog}: error: {type(exc).__name__}: {text}", file=sys.stderr)
        return 128 + caught[0] if caught else exit_code_of(exc)  # terminated, whatever the clean-up then raised


def exit_code_of(exc: BaseException) -> int:
    """The code of a library error that reached the command: its type says whose fault it is.

    A store that does not answer is the operator's network or server (3), a setting that cannot work
    or a missing extra is theirs to fix before any rerun (2, 6); anything else is the work failing (1).
    """
    from gateway.errors import ConfigurationError, MissingExtraError, StoreUnavailableError

    if isinstance(exc, StoreUnavailableError):
        return EXIT_UNREACHABLE
    if isinstance(exc, MissingExtraError):
        return EXIT_MISSING_EXTRA
    if isinstance(exc, ConfigurationError):
        return EXIT_USAGE
    return EXIT_FAILED
