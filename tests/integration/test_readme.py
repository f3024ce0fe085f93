"""The README's getting-started code runs as written, from outside the repository."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_getting_started_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"## Getting started.*?```python\n(.*?)```", readme, re.S)
    assert match, "README has a Getting started python block"
    script = tmp_path / "getting_started.py"
    script.write_text(match.group(1))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("delivered None") == 3
    for size in (100, 2_000_000, 20_000_000):
        assert f"b'size-{size}' {size}" in out.stdout
