"""Run inside a fresh virtualenv that has the built wheel with some extras: what README promises for them.

``--list-extras README.md`` prints the extras sets README's install block documents, one a line.
``--extras SET README.md`` checks, in the current interpreter:

- every public module of ``gateway`` and ``stores`` imports (under ``-W error``), or fails with an
  ``ImportError`` naming ``kafka-hybrid-gateway[X]`` for an extra X this install lacks;
- every README code block marked ``<!-- installed: A,B -->`` with A and B among the extras runs:
  python blocks with this interpreter, ``console`` blocks line by line with this virtualenv's scripts.

The README is the source, so the docs cannot drift from what runs.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
import tempfile
from pathlib import Path

INSTALL_LINE = re.compile(r'pip install "[^"\[]*\[([a-z0-9,]+)\]"')
MARKED_BLOCK = re.compile(r"<!-- installed: ([a-z0-9,]+) -->\s*```(python|console)\n(.*?)```", re.S)
NAMED_EXTRA = re.compile(r"kafka-hybrid-gateway\[([a-z0-9]+)\]")


def documented_sets(readme: str) -> list[str]:
    block = readme.split("## Install as a library", 1)[1].split("\n## ", 1)[0]
    return list(dict.fromkeys(INSTALL_LINE.findall(block)))


def expand(extras: set[str]) -> set[str]:
    """``all`` stands for the extras it names in pyproject.toml."""
    if "all" in extras:
        extras |= {"redis", "s3", "gcs", "azure", "cli", "prometheus", "otel", "spark", "encryption", "peers"}
    return extras


def check_modules(extras: set[str]) -> list[str]:
    failures = []
    for top in ("gateway", "stores"):
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, f"{top}."):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            try:
                importlib.import_module(info.name)
            except ImportError as exc:
                named = NAMED_EXTRA.findall(str(exc))
                if not named or named[0] in extras:
                    failures.append(f"{info.name}: {type(exc).__name__}: {exc}")
            except Exception as exc:  # noqa: BLE001  # any other failure is one to report, not to stop at
                failures.append(f"{info.name}: {type(exc).__name__}: {exc}")
    return failures


def run_blocks(readme: str, extras: set[str]) -> tuple[int, list[str]]:
    ran, failures = 0, []
    scripts = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"}
    for needs, kind, body in MARKED_BLOCK.findall(readme):
        if not expand(set(needs.split(","))) <= extras:
            continue
        with tempfile.TemporaryDirectory() as work:  # outside the checkout: only the installed package is found
            if kind == "python":
                commands = [[sys.executable, "-W", "error", "-c", body]]
            else:
                commands = [line.split() for line in body.splitlines() if line.strip() and not line.startswith("#")]
            for command in commands:
                ran += 1
                out = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=300)
                if out.returncode != 0:
                    shown = " ".join(command) if kind == "console" else f"the {kind} block marked {needs}"
                    failures.append(f"{shown}: exit {out.returncode}\n{out.stdout[-1500:]}{out.stderr[-3000:]}")
    return ran, failures


def main(argv: list[str]) -> int:
    readme = Path(argv[-1]).read_text()
    if argv[0] == "--list-extras":
        print("\n".join(documented_sets(readme)))  # noqa: T201  # read by .ci/wheel
        return 0
    extras = expand(set(argv[1].split(",")))
    failures = check_modules(extras)
    ran, block_failures = run_blocks(readme, extras)
    failures += block_failures
    for failure in failures:
        print(f"FAIL [{argv[1]}] {failure}", file=sys.stderr)  # noqa: T201
    print(f"[{argv[1]}] public modules checked, {ran} README commands run: {len(failures)} failed")  # noqa: T201
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
