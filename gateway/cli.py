"""The ``gateway`` command line."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, cast

from gateway.command import (
    COMMAND_EXIT_STATUSES,
    COMMANDS_GROUP,
    EXIT_INCOMPLETE,
    EXIT_MISSING_EXTRA,
    EXIT_REFUSED,
    EXIT_USAGE,
    Command,
    OneLineParser,
    check_bucket,
    check_container,
    client_settings,
    exit_status_text,
    fail,
    kafka_logger,
    probe_kafka,
    run,
)
from gateway.config import check_url_userinfo, mask_url
from gateway.errors import ConfigurationError
from gateway.settings import TextSetting
from gateway.settings import stores as store_keys

GC_EXIT_STATUSES = COMMAND_EXIT_STATUSES["gc"]
RECONCILE_EXIT_STATUSES = COMMAND_EXIT_STATUSES["reconcile"]


def build_parser() -> argparse.ArgumentParser:
    from gateway import __version__

    parser = OneLineParser(
        prog="gateway",
        description="Kafka messages of any size: LinkedIn-compatible chunking or Redis/S3 references, per message.",
    )
    parser.add_argument("--version", action="version", version=f"gateway {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    gc = sub.add_parser(
        "gc",
        help="find payloads whose envelope never landed in Kafka (crashed producers, failed rollbacks); "
        "a dry run unless --delete",
        description="Lists the store writes still marked pending after the grace period and reads the topics "
        "they belong to (--bootstrap) up to the end offsets taken at the start, then read_committed over the "
        "envelopes found. A payload is deleted only when that read was complete and found no envelope with its "
        "message id or locator, whatever store name the envelopes use, or found only envelopes of aborted "
        "transactions; a payload whose committed envelope is found keeps its data (only the pending mark is "
        "cleared); anything else (metadata error, read incomplete or past --scan-timeout, undecodable envelope "
        "mentioning it, envelope of a transaction still open) is kept with its mark and reported with the "
        "reason. Also aborts incomplete S3 multipart uploads older than the "
        "grace period. Without --delete this is a dry run. " + exit_status_text(GC_EXIT_STATUSES),
    )
    _store_args(gc)
    gc.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="seconds a write may stay pending before it counts as orphaned (default 3600)",
    )
    gc.add_argument("--bootstrap", help="Kafka bootstrap servers: the topics are read to prove absence")
    _credential_args(gc)
    gc.add_argument(
        "--scan-timeout",
        type=float,
        default=600.0,
        help="seconds allowed to read each topic; payloads of a topic not read in time are kept (default 600)",
    )
    mode = gc.add_mutually_exclusive_group()
    mode.add_argument("--delete", action="store_true", help="delete what was proved dead (default: dry run)")
    mode.add_argument("--dry-run", action="store_true", help="report only, delete nothing (the default)")
    gc.add_argument(
        "--no-verify",
        action="store_true",
        help="without --bootstrap, treat every write pending past the grace period as dead "
        "(unsafe: a producer that died after the acknowledgement loses a live payload)",
    )
    _progress_args(gc)
    reconcile = sub.add_parser(
        "reconcile",
        help="Spark job: find payloads no envelope points at (orphans) and envelopes whose payload is gone",
        description="Scans every envelope of the topics and of their mirrors (--reference-topic-renames) with "
        "Spark (hybrid-kafka-envelopes), read_uncommitted up to the high watermarks, lists every object under "
        "the store's prefix, and anti-joins both ways. Orphans are objects of those topics no envelope points at "
        "that were written before now - grace; dangling envelopes point at nothing. An object only envelopes of "
        "a transaction still open (or records after it) point at, and an envelope whose payload is gone, are "
        "decided as gateway gc decides (read_committed): committed is live or dangling, aborted is neither, "
        "open is kept and reported. Deletes orphans only with --delete, and only when no object under the "
        "prefix belongs to a topic not named. " + exit_status_text(RECONCILE_EXIT_STATUSES),
    )
    reconcile.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    reconcile.add_argument("--topic", required=True, action="append", help="topic to reconcile (repeat for several)")
    reconcile.add_argument("--redis-url", help="Redis store, e.g. redis://127.0.0.1:6379/0")
    _setting_flag(reconcile, store_keys.REDIS_PREFIX, "key prefix of the Redis store")
    reconcile.add_argument("--s3-endpoint", help="S3 endpoint URL (omit for AWS)")
    reconcile.add_argument("--s3-bucket", help="S3 bucket of the store")
    _setting_flag(reconcile, store_keys.S3_PREFIX, "key prefix of the S3 store")
    reconcile.add_argument("--s3-region", help="S3 region (default: boto3's configuration)")
    reconcile.add_argument("--s3-ca-bundle", metavar="PEM", help=_S3_CA_HELP)
    _setting_flag(reconcile, store_keys.REDIS_NAME, "store name the producers gave the Redis store")
    _setting_flag(reconcile, store_keys.S3_NAME, "store name the producers gave the S3 store")
    _cloud_args(reconcile, "store name the producers gave")
    reconcile.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="seconds an unreferenced object may be young before it counts as orphan (default 3600)",
    )
    reconcile.add_argument(
        "--reference-topic-renames",
        metavar="FORMATS",
        help="the consumers' reference.topic.renames, e.g. source.${topic}: the cluster's topics so named after a "
        "topic given are its mirrors and are scanned too (a mirror can also be given as one more --topic)",
    )
    reconcile.add_argument(
        "--delete",
        action="store_true",
        help="delete the orphans found (refused, exit 7, when the prefix also holds objects of topics not named)",
    )
    reconcile.add_argument("--master", default=None, help="Spark master (default SPARK_MASTER or local[2])")
    _credential_args(reconcile)
    _progress_args(reconcile)
    for name, command in _commands().items():
        command.add_to(sub, name)
    return parser


class _EntryCommand:
    """One ``gateway.commands`` entry point: the command it names, or why it cannot be loaded."""

    def __init__(self, entry: EntryPoint) -> None:
        self.entry = entry
        self.command: Command | None = None
        self.problem = ""
        try:
            self.command = _load(entry)
        except ImportError as exc:
            self.problem = _unavailable(entry, exc)

    def add_to(self, sub: Any, name: str) -> None:
        command = self.command
        if command is None:
            sub.add_parser(name, help=f"(not available: see gateway {name} --help)", description=self.problem)
            return
        command.add_arguments(sub.add_parser(name, help=command.help, description=command.description))

    def run(self, args: argparse.Namespace) -> int:
        if self.command is None:
            fail(self.problem, EXIT_MISSING_EXTRA)
        return self.command.run(args)


def _unavailable(entry: EntryPoint, exc: ImportError) -> str:
    """Why the command cannot run in this install, and the one thing that makes it run."""
    extras = ",".join(entry.extras)
    if extras:
        return f"gateway {entry.name} needs the {extras} extra: pip install 'kafka-hybrid-gateway[{extras}]' ({exc})"
    if (exc.name or "").split(".")[0] == entry.module.split(".")[0]:  # the command's own package is not here
        return (
            f"gateway {entry.name} runs from a source checkout of kafka-hybrid-gateway (it is not in the wheel): "
            f"make {entry.name} there"
        )
    return f"gateway {entry.name} is not available ({exc}); in the source checkout, make setup installs what it needs"


def _load(entry: EntryPoint) -> Command:
    """The entry point's command; a module of the source checkout (not in the wheel) is found from the cwd."""
    try:
        return cast("Command", entry.load())
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if not top or not (Path.cwd() / top / "__init__.py").is_file() or str(Path.cwd()) in sys.path:
            raise
        sys.path.insert(0, str(Path.cwd()))
        return cast("Command", entry.load())


@functools.cache
def _commands() -> dict[str, _EntryCommand]:
    """The subcommands other modules add (``demo``, ``bench``), declared in pyproject.toml, by name."""
    return {entry.name: _EntryCommand(entry) for entry in sorted(entry_points(group=COMMANDS_GROUP), key=_name)}


def _name(entry: EntryPoint) -> str:
    return entry.name


_S3_CA_HELP = (
    "CA certificates (PEM) to verify an HTTPS --s3-endpoint with, also s3.ca.bundle in --command-config "
    "(default: boto3's, AWS_CA_BUNDLE)"
)


def _setting_flag(parser: argparse.ArgumentParser, setting: TextSetting, what: str) -> None:
    """``--redis-prefix`` and the like: the flag of a store setting, with the settings schema's default."""
    flag = "--" + setting.key.replace(".", "-")
    parser.add_argument(flag, default=setting.default, help=f"{what} (default {setting.default})")


def _store_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis-url", help="Redis store to sweep, e.g. redis://127.0.0.1:6379/0")
    _setting_flag(parser, store_keys.REDIS_PREFIX, "key prefix of the Redis store")
    _setting_flag(parser, store_keys.REDIS_NAME, "label of the Redis store in the report")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL (omit for AWS)")
    parser.add_argument("--s3-bucket", help="S3 bucket to sweep")
    _setting_flag(parser, store_keys.S3_PREFIX, "key prefix of the S3 store")
    parser.add_argument("--s3-region", help="S3 region (default: boto3's configuration)")
    parser.add_argument("--s3-ca-bundle", metavar="PEM", help=_S3_CA_HELP)
    _setting_flag(parser, store_keys.S3_NAME, "label of the S3 store in the report")
    _cloud_args(parser, "label in the report of")


def _cloud_args(parser: argparse.ArgumentParser, name_help: str) -> None:
    """The GCS and Azure Blob stores' flags; the Azure connection string (it holds the account key) is not one."""
    parser.add_argument("--gcs-bucket", help="GCS bucket of the store (Google credentials as the environment gives)")
    parser.add_argument("--gcs-prefix", default="gw/", help="key prefix of the GCS store (default gw/)")
    parser.add_argument("--gcs-endpoint", help="GCS endpoint URL, for an emulator (then without credentials)")
    parser.add_argument("--gcs-name", default="gcs", help=f"{name_help} the GCS store (default gcs)")
    parser.add_argument(
        "--azure-container",
        help="Azure Blob container of the store; its connection string from azure.connection.string in "
        "--command-config, GATEWAY_AZURE_CONNECTION_STRING or AZURE_STORAGE_CONNECTION_STRING",
    )
    parser.add_argument("--azure-prefix", default="gw/", help="key prefix of the Azure store (default gw/)")
    parser.add_argument("--azure-name", default="azure", help=f"{name_help} the Azure store (default azure)")


def _progress_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet", action="store_true", help="no progress on stderr (the report and errors are still printed)"
    )
    parser.add_argument(
        "--progress-every",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between progress lines on stderr when it is not a terminal (default 2)",
    )


def _progress(args: argparse.Namespace, prog: str) -> Any:
    """The progress line of a long command, or ``None`` with ``--quiet``."""
    if args.quiet:
        return None
    from gateway.gc.progress import ProgressLine

    return ProgressLine(prog, every=args.progress_every)


def _credential_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra confluent-kafka client setting, e.g. security.protocol=SSL (repeatable); "
        "put secrets in --command-config or the environment, not here",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="properties file (as Kafka's tools take): confluent-kafka settings such as sasl.password, and "
        "store settings redis.url, redis.username, redis.password, s3.access.key, s3.secret.key, s3.ca.bundle, "
        "azure.connection.string. "
        "Also read from the environment: GATEWAY_KAFKA_SASL_PASSWORD, GATEWAY_REDIS_PASSWORD, ...",
    )


def _settings(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """Kafka settings and store credentials from env, file and argv; ``--redis-url`` may come from them too."""
    kafka, stores = client_settings(args.command_config, _kafka_options(args.kafka_option))
    if not args.redis_url and stores.get(store_keys.REDIS_URL.key):
        args.redis_url = stores[store_keys.REDIS_URL.key]
    if not args.s3_ca_bundle and stores.get(store_keys.S3_CA_BUNDLE.key):
        args.s3_ca_bundle = stores[store_keys.S3_CA_BUNDLE.key]
    return kafka, stores


def _redis_kwargs(stores: dict[str, str]) -> dict[str, str]:
    given = {"username": store_keys.REDIS_USERNAME.key, "password": store_keys.REDIS_PASSWORD.key}
    return {name: stores[key] for name, key in given.items() if stores.get(key)}


def _with_credentials(url: str, kwargs: dict[str, str]) -> str:
    """``url`` with the user and password of ``kwargs`` in it, for the Spark options (which take one URL).

    What the URL names itself wins, part by part, as with redis-py's ``from_url(url, **kwargs)`` that
    ``gateway gc`` uses: ``rediss://gateway@host`` keeps its user and takes the password from ``kwargs``.
    """
    from urllib.parse import quote, urlsplit, urlunsplit

    if not kwargs.get("password"):
        return url
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if colon:
        return url  # the URL has its own password
    user = user if at else quote(kwargs.get("username", ""), safe="")
    netloc = f"{user}:{quote(kwargs['password'], safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _kafka_options(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--kafka-option needs KEY=VALUE, got {item!r}", EXIT_USAGE)
        out[key.strip()] = value
    return out


def _check_store_args(args: argparse.Namespace, credentials: dict[str, str]) -> None:
    """What gc and reconcile share, checked before any connection: a bad value is exit 2, not a traceback."""
    if not (args.redis_url or args.s3_bucket or args.gcs_bucket or args.azure_container):
        fail("name a store with --redis-url, --s3-bucket, --gcs-bucket or --azure-container", EXIT_USAGE)
    if args.grace < 0:
        fail(f"--grace must be at least 0 seconds, got {args.grace:g}", EXIT_USAGE)
    if args.progress_every < 0:
        fail(f"--progress-every must be at least 0 seconds, got {args.progress_every:g}", EXIT_USAGE)
    if args.redis_url and not args.redis_url.startswith(("redis://", "rediss://", "unix://")):
        fail(
            f"--redis-url must start with redis://, rediss:// or unix://, got {mask_url(args.redis_url)!r}", EXIT_USAGE
        )
    try:
        check_url_userinfo(args.redis_url or "", "--redis-url")
    except ConfigurationError as exc:
        fail(str(exc), EXIT_USAGE)
    named = [
        (flag, name)
        for flag, name, given in (
            ("--redis-name", args.redis_name, args.redis_url),
            ("--s3-name", args.s3_name, args.s3_bucket),
            ("--gcs-name", args.gcs_name, args.gcs_bucket),
            ("--azure-name", args.azure_name, args.azure_container),
        )
        if given
    ]
    for i, (flag, name) in enumerate(named):
        for other, same in named[i + 1 :]:
            if name == same:
                fail(f"{flag} and {other} must differ (both {name!r})", EXIT_USAGE)
    if args.azure_container and not _azure_connection(credentials):
        fail(
            "--azure-container needs the account's connection string: azure.connection.string in "
            "--command-config, GATEWAY_AZURE_CONNECTION_STRING or AZURE_STORAGE_CONNECTION_STRING",
            EXIT_USAGE,
        )


def _azure_connection(credentials: dict[str, str]) -> str | None:
    return credentials.get("azure.connection.string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING") or None


def _cloud_settings(args: argparse.Namespace, credentials: dict[str, str]) -> dict[str, str]:
    """The ``gcs.*`` / ``azure.*`` settings of the flags, which Spark and stores.blob.settings take."""
    settings: dict[str, str] = {}
    if args.gcs_bucket:
        settings.update({"gcs.bucket": args.gcs_bucket, "gcs.prefix": args.gcs_prefix, "gcs.name": args.gcs_name})
        if args.gcs_endpoint:
            settings["gcs.endpoint"] = args.gcs_endpoint
    if args.azure_container:
        connection = _azure_connection(credentials) or ""
        settings.update({"azure.container": args.azure_container, "azure.prefix": args.azure_prefix})
        settings.update({"azure.name": args.azure_name, "azure.connection.string": connection})
    return settings


def _cloud_stores(args: argparse.Namespace, credentials: dict[str, str]) -> dict[str, object]:
    """The GCS and Azure stores of the flags, each checked to exist (one line and exit 3 if not)."""
    from types import SimpleNamespace

    from gateway.store_registry import cloud_store_fields, cloud_stores

    opened = cloud_stores(SimpleNamespace(**cloud_store_fields(_cloud_settings(args, credentials))))
    for store in opened.values():
        check_container(store)
    return dict(opened)


def _s3_client(args: argparse.Namespace, stores: dict[str, str]) -> Any:
    """A boto3 client for the store's bucket, after checking the bucket exists (one line if not).

    Credentials: ``s3.access.key`` / ``s3.secret.key`` from ``--command-config`` or the environment,
    else boto3's own chain (``AWS_*`` variables, profiles, instance roles).
    """
    import boto3

    named = (("endpoint_url", args.s3_endpoint), ("region_name", args.s3_region), ("verify", args.s3_ca_bundle))
    kwargs = {k: v for k, v in named if v}
    if stores.get("s3.access.key") and stores.get("s3.secret.key"):
        kwargs.update(aws_access_key_id=stores["s3.access.key"], aws_secret_access_key=stores["s3.secret.key"])
    client = boto3.client("s3", **kwargs)
    check_bucket(client, args.s3_bucket, args.s3_endpoint or "AWS")
    return client


def _gc(args: argparse.Namespace) -> int:
    from gateway import store_registry
    from gateway.gc.progress import ignore
    from gateway.gc.sweeper import kafka_verifier, sweep, unverified

    options, credentials = _settings(args)
    _check_store_args(args, credentials)
    if args.scan_timeout < 0:
        fail(f"--scan-timeout must be at least 0 seconds, got {args.scan_timeout:g}", EXIT_USAGE)
    if args.delete and not args.bootstrap and not args.no_verify:
        fail(
            "--delete needs --bootstrap, so that a payload whose envelope landed is kept; "
            "--no-verify deletes on the pending mark alone",
            EXIT_USAGE,
        )
    if args.bootstrap:
        probe_kafka(args.bootstrap, options)
    stores: dict[str, object] = {}
    if args.redis_url:
        stores[args.redis_name] = store_registry.redis_store(  # each store's client only when it is named
            store_registry.redis_client(args.redis_url, **_redis_kwargs(credentials)),
            prefix=args.redis_prefix,
            name=args.redis_name,
            close_client=True,
        )
    if args.s3_bucket:
        client = _s3_client(args, credentials)
        stores[args.s3_name] = store_registry.s3_store(
            client, bucket=args.s3_bucket, prefix=args.s3_prefix, name=args.s3_name
        )
    stores.update(_cloud_stores(args, credentials))
    shown = _progress(args, "gateway gc")
    observer = ignore if shown is None else shown
    config = {**options, "bootstrap.servers": args.bootstrap, "logger": kafka_logger()}
    verifier = (
        kafka_verifier(config, timeout_s=args.scan_timeout, on_progress=observer)
        if args.bootstrap
        else unverified(args.no_verify)
    )
    try:
        grace_ms = int(args.grace * 1000)
        report = sweep(stores, grace_ms=grace_ms, verifier=verifier, dry_run=not args.delete, on_progress=observer)
    finally:
        if shown is not None:
            shown.close()
    return _print_report("gateway gc", _gc_lines(report), report.exit_code(), f"{len(report.kept)} pending payloads")


def _gc_lines(report: Any) -> list[str]:
    verb, abort = ("would delete", "would abort") if report.dry_run else ("deleted", "aborted")
    head = "dry run, nothing changed (pass --delete to act): " if report.dry_run else ""
    out = [
        f"{head}examined {report.examined} pending writes: {verb} {len(report.deleted)}, "
        f"kept {len(report.landed)} whose envelope landed, kept {len(report.kept)} unproved, "
        f"{len(report.failed)} failed; {abort} {len(report.aborted)} stale multipart uploads"
    ]
    out += [f"  {verb}: {locator}: {report.proofs.get(locator, 'proved dead')}" for locator in report.deleted]
    out += [f"  landed: {locator}" for locator in report.landed]
    out += [f"  kept: {locator}: {why}" for locator, why in report.kept]
    out += [f"  failed: {what}: {error}" for what, error in report.failed]
    out += [f"  {abort} upload: {label}" for label in report.aborted]
    return out


def _reconcile(args: argparse.Namespace) -> int:
    from gateway.errors import check_extra

    check_extra("spark", "gateway reconcile", "pyspark", "pyarrow")  # before any connection, naming the extra
    extra, credentials = _settings(args)
    _check_store_args(args, credentials)
    _check_renames(args.reference_topic_renames)
    probe_kafka(args.bootstrap, extra, topics=args.topic)
    if args.redis_url:  # checked here: a dead Redis is one line and exit 3, not a Spark job's failure
        from gateway.store_registry import redis_client

        redis_client(args.redis_url, **_redis_kwargs(credentials)).close()
    if args.s3_bucket:
        _s3_client(args, credentials)
    for store in _cloud_stores(args, credentials).values():  # checked here: one line, not a Spark job's failure
        store.close()  # type: ignore[attr-defined]
    options = {"kafka.bootstrap.servers": args.bootstrap, "subscribe": ",".join(args.topic)}
    if args.reference_topic_renames:
        options["reference.topic.renames"] = args.reference_topic_renames
    options.update({f"kafka.{key}": value for key, value in extra.items()})
    if args.redis_url:
        url = _with_credentials(args.redis_url, _redis_kwargs(credentials))
        options.update({"redis.url": url, "redis.prefix": args.redis_prefix, "redis.name": args.redis_name})
    if args.s3_bucket:
        options.update({"s3.bucket": args.s3_bucket, "s3.prefix": args.s3_prefix, "s3.name": args.s3_name})
        if args.s3_endpoint:
            options["s3.endpoint"] = args.s3_endpoint
        if args.s3_region:
            options["s3.region"] = args.s3_region
        if args.s3_ca_bundle:
            options["s3.ca.bundle"] = args.s3_ca_bundle
        options.update({key: credentials[key] for key in ("s3.access.key", "s3.secret.key") if key in credentials})
    options.update(_cloud_settings(args, credentials))
    from pyspark.sql import SparkSession

    from gateway.spark import local_session, reconcile

    owned = SparkSession.getActiveSession() is None  # a caller's session (tests, notebooks) is left running
    spark = local_session(args.master, app_name="gateway-reconcile")
    shown = _progress(args, "gateway reconcile")
    try:
        if shown is None:
            report = reconcile(spark, options, grace_seconds=args.grace, delete=args.delete)
        else:
            from gateway.gc.progress import watch_spark

            stop_watching = watch_spark(spark, shown, args.progress_every)
            try:
                report = reconcile(spark, options, grace_seconds=args.grace, delete=args.delete)
            finally:
                stop_watching()
                shown.close()
    finally:
        if owned:
            spark.stop()
    code = _print_report("gateway reconcile", report.lines(), report.exit_code(), str(len(report.undecided)))
    if code == EXIT_REFUSED:
        print(f"gateway reconcile: {report.withheld}", file=sys.stderr)
    return code


def _print_report(prog: str, lines: Iterable[str], code: int, kept: str) -> int:
    """The report on stdout; for :data:`EXIT_INCOMPLETE`, one line on stderr saying what was kept and why."""
    for line in lines:
        print(line)
    if code == EXIT_INCOMPLETE:
        print(
            f"{prog}: incomplete: {kept} kept because nothing proved them live or dead (reasons above);"
            " run again once that is resolved",
            file=sys.stderr,
        )
    return code


def _check_renames(formats: str | None) -> None:
    """``--reference-topic-renames`` parsed as the consumer parses it: a bad format is exit 2 before any connection."""
    from gateway.consumer.reference_rules import parse_topic_renames
    from gateway.errors import ConfigurationError

    try:
        parse_topic_renames(formats)
    except ConfigurationError as exc:
        fail(f"--reference-topic-renames: {exc}", EXIT_USAGE)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    missing = _commands().get(args.command or "")
    if unknown and (missing is None or missing.command is not None):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # an unavailable command says why instead
    if args.command is None:  # a script that forgot the command must not pass as a run that did nothing wrong
        parser.print_usage(sys.stderr)
        print(f"gateway: error: name a command: {', '.join(sorted(_subcommands(parser)))}", file=sys.stderr)
        return EXIT_USAGE
    return run(f"gateway {args.command}", lambda: _dispatch(parser, args))


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    actions = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return [name for action in actions for name in action.choices]


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "gc":
        return _gc(args)
    if args.command == "reconcile":
        return _reconcile(args)
    command = _commands().get(args.command)
    if command is not None:
        return command.run(args)
    parser.print_help()
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
