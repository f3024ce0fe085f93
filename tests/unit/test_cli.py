"""``gateway``'s subcommands that live elsewhere (``demo``, ``bench``) come from entry points, not imports."""

from __future__ import annotations

import ast
import re
import time
from importlib import import_module
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from gateway.cli import _EntryCommand
from gateway.command import COMMANDS_GROUP, EXIT_MISSING_EXTRA, CommandError

ROOT = Path(__file__).resolve().parents[2]


def declared() -> dict[str, str]:
    """The ``[project.entry-points."gateway.commands"]`` table of pyproject.toml (tomllib is 3.11+)."""
    text = (ROOT / "pyproject.toml").read_text()
    table = text.split(f'[project.entry-points."{COMMANDS_GROUP}"]\n', 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^(\w+) = "([^"]+)"$', table, re.MULTILINE))


def test_cli_imports_neither_the_demo_nor_the_benchmarks() -> None:
    tree = ast.parse((ROOT / "gateway" / "cli.py").read_text())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not {name for name in imported if name.startswith(("benchmarks", "gateway.testing"))}


def test_demo_and_bench_are_declared_entry_points_that_load() -> None:
    entries = declared()
    assert set(entries) == {"demo", "bench"}
    for name, value in entries.items():
        entry = EntryPoint(name, value, COMMANDS_GROUP)
        command = getattr(import_module(entry.module), entry.attr)
        assert callable(command.add_arguments) and callable(command.run) and command.help, name
    assert EntryPoint("demo", entries["demo"], COMMANDS_GROUP).extras == ["testing"]
    assert EntryPoint("bench", entries["bench"], COMMANDS_GROUP).extras == []  # no published extra: a checkout


def test_a_command_whose_extra_is_missing_names_the_extra_to_install() -> None:
    entry = EntryPoint("demo", "no_such_package_here.command:COMMAND [testing]", COMMANDS_GROUP)
    command = _EntryCommand(entry)
    assert command.command is None
    with pytest.raises(CommandError, match=r"pip install 'kafka-hybrid-gateway\[testing\]'") as raised:
        command.run(object())  # type: ignore[arg-type]
    assert raised.value.code == EXIT_MISSING_EXTRA


def test_bench_from_a_wheel_says_in_one_line_that_it_runs_from_a_checkout() -> None:
    """The wheel has no ``benchmarks`` package and no extra installs one: the advice is the checkout."""
    entry = EntryPoint("bench", "no_such_package_here.command:COMMAND", COMMANDS_GROUP)
    command = _EntryCommand(entry)
    with pytest.raises(CommandError) as raised:
        command.run(object())  # type: ignore[arg-type]
    assert raised.value.code == EXIT_MISSING_EXTRA
    assert "source checkout" in str(raised.value) and "make bench" in str(raised.value)
    assert "pip install" not in str(raised.value) and "\n" not in str(raised.value)


def test_the_bench_extra_is_not_published() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    extras = text.split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^bench\s*=", extras, re.MULTILINE)
    assert "matplotlib" not in extras


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("rediss://h:6380/0?ssl_ca_certs=/ca.pem", "rediss://file-user:p%40ss@h:6380/0?ssl_ca_certs=/ca.pem"),
        ("rediss://gateway@h:6380/0", "rediss://gateway:p%40ss@h:6380/0"),  # it dropped the password
        ("rediss://gateway:own@h:6380/0", "rediss://gateway:own@h:6380/0"),
        ("rediss://:own@h:6380/0", "rediss://:own@h:6380/0"),
    ],
)
def test_reconcile_puts_the_file_credentials_in_the_url_where_the_url_has_none(url: str, expected: str) -> None:
    """As gc's ``from_url(url, username=, password=)``: the URL's own user or password wins, part by part."""
    from gateway.cli import _with_credentials

    assert _with_credentials(url, {"username": "file-user", "password": "p@ss"}) == expected


@pytest.mark.parametrize("cleanup_raises", [False, True])
def test_a_terminated_command_exits_128_plus_the_signal_whatever_its_clean_up_raises(
    cleanup_raises: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM unwinds the command; a clean-up that then raises (a client closed mid-call) must not turn the
    terminated command into a failed one (exit 1), which a supervisor would treat differently."""
    import os
    import signal

    from gateway.command import run

    def action() -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises SystemExit here
            return 0
        finally:
            if cleanup_raises:
                raise RuntimeError("closing a client interrupted mid-call")

    if cleanup_raises:
        assert run("gateway test", action) == 128 + signal.SIGTERM
        assert "RuntimeError" in capsys.readouterr().err
    else:
        with pytest.raises(SystemExit) as exited:
            run("gateway test", action)
        assert exited.value.code == 128 + signal.SIGTERM


def test_reconcile_refuses_a_bad_rename_format_before_any_connection(capsys: pytest.CaptureFixture[str]) -> None:
    """``--reference-topic-renames`` is parsed as the consumers parse ``reference.topic.renames``: exit 2, one
    line, and no broker is asked (the one given does not exist)."""
    from gateway.cli import main

    argv = ["reconcile", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--redis-url", "redis://127.0.0.1:1/0"]
    assert main([*argv, "--reference-topic-renames", "source."]) == 2
    err = capsys.readouterr().err
    assert "--reference-topic-renames" in err and "${topic}" in err and "cannot reach" not in err
