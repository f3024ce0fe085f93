"""The code layout docs/development.md describes: small folders, private modules kept private, no import cycles."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "stores")
MAX_MODULES_PER_FOLDER = 15


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Modules of ours that ``name`` imports, at run time or for type checking alike.

    ``from a.b import c`` counts as importing ``a.b.c`` when that is a module, and ``a.b`` only when
    some imported name is not one; a module's own packages are not counted (Python imports them first).
    """
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            targets += submodules
            if len(submodules) < len(node.names):
                targets.append(base)
        elif isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        for target in targets:
            if target in known and target != name and not name.startswith(target + "."):
                yield target


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports_of(name, path, known)) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_folder_holds_more_than_fifteen_modules() -> None:
    folders: dict[Path, int] = {}
    for path in modules().values():
        folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = {str(folder.relative_to(ROOT)): n for folder, n in folders.items() if n > MAX_MODULES_PER_FOLDER}
    assert crowded == {}


def test_the_import_graph_has_no_cycle_type_only_imports_included() -> None:
    assert cycles(graph()) == []


def test_a_cycle_is_found_when_there_is_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_private_modules_are_imported_only_from_their_own_folder() -> None:
    """``pkg/_mod.py`` is private to ``pkg/`` and the folders under it."""
    trespasses = []
    for name, targets in graph().items():
        for target in targets:
            owner, _, leaf = target.rpartition(".")
            if (
                leaf.startswith("_")
                and not leaf.startswith("__")
                and name != owner
                and not name.startswith(owner + ".")
            ):
                trespasses.append(f"{name} imports {target}")
    assert trespasses == []


# -- floors: every import runs down (or sideways, within a floor), none runs back up ---------------------
FLOORS: tuple[tuple[str, ...], ...] = (
    ("gateway/errors", "gateway/clock", "gateway/histogram", "gateway/serialization", "gateway/health",
     "gateway/auditing"),
    ("gateway/settings",),
    ("gateway/protocol", "gateway/config", "gateway/store"),
    ("gateway/policy", "gateway/librdkafka"),
    ("gateway/core", "gateway/command"),
    ("gateway/encryption", "gateway/gc", "gateway/streams"),
    ("stores/base",),
    ("stores/blob", "stores/redis"),
    ("stores/s3", "stores/gcs", "stores/azure"),
    ("stores",),
    # the clients; telemetry and tracing type the producer's message, so they share its floor (issue 40, 6)
    ("gateway/producer", "gateway/consumer", "gateway/telemetry", "gateway/tracing", "gateway/prometheus"),
    ("gateway", "gateway/aio", "gateway/store_registry"),
    ("gateway/spark",),
    ("gateway/cli", "gateway/testing"),
    ("gateway/embedded",),
)  # fmt: skip
"""Lowest first. A room is a folder of ``gateway/`` or ``stores/`` (with the folders under it), or a module at
the top of either package; ``gateway`` and ``stores`` are the packages' own ``__init__``. The library's core
and the Store contract lie below ``stores``, which the library reaches only through ``gateway/store_registry``
(the entry points' one door), so imports between ``gateway`` and ``stores`` run one way."""


def room_of(module: str, path: Path) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return parts[0]
    return "/".join(parts[:2])


def upward_arrows(edges: dict[str, set[str]], rooms: dict[str, str], floors: tuple[tuple[str, ...], ...]) -> list[str]:
    """Imports from a room to a room on a higher floor, as ``"a -> b"`` lines."""
    floor = {room: level for level, members in enumerate(floors) for room in members}
    return sorted(
        f"{source} -> {target}"
        for source, targets in edges.items()
        for target in targets
        if floor[rooms[target]] > floor[rooms[source]]
    )


def test_every_room_has_its_floor_and_no_import_runs_back_up() -> None:
    known = modules()
    rooms = {name: room_of(name, path) for name, path in known.items()}
    placed = [room for members in FLOORS for room in members]
    assert sorted(set(rooms.values())) == sorted(placed), "a new folder needs its floor in FLOORS"
    assert len(placed) == len(set(placed))
    assert upward_arrows(graph(), rooms, FLOORS) == []


def test_an_import_that_runs_back_up_is_found() -> None:
    rooms = {"low.a": "low", "high.b": "high", "high.c": "high"}
    edges = {"low.a": {"high.b"}, "high.b": {"low.a", "high.c"}, "high.c": set()}
    assert upward_arrows(edges, rooms, (("low",), ("high",))) == ["low.a -> high.b"]


def test_the_library_reaches_stores_only_through_its_registry() -> None:
    reaching = sorted(
        name
        for name, targets in graph().items()
        if name.split(".")[0] == "gateway" and any(target.split(".")[0] == "stores" for target in targets)
    )
    assert reaching == ["gateway.store_registry"]


def sniffed(names: frozenset[str], source: str) -> list[tuple[int, str]]:
    """``getattr``/``hasattr`` calls in ``source`` that ask an object for one of ``names``, with their lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in names
        ):
            found.append((node.lineno, str(node.args[1].value)))
    return found


def test_no_store_capability_is_sniffed() -> None:
    """Store declares what a store may do (gateway/store.py), with defaults; nothing asks an object whether it can.

    The names are Store's own, and what locators were once asked for (``topic``, ``message_id``: now
    ``Store.address_of``); ``close``, ``metrics``, ``histograms`` and ``name`` are left out, since the clients
    share them and are duck-typed elsewhere."""
    from gateway.store import Store

    shared = {"close", "metrics", "histograms", "name"}
    names = frozenset({n for n in vars(Store) if not n.startswith("_")} - shared | {"topic", "message_id"})
    found = [
        f"{name}:{line}: {attr}"
        for name, path in modules().items()
        if not name.startswith("gateway.testing")
        for line, attr in sniffed(names, path.read_text())
    ]
    assert found == []
    assert sniffed(names, "t = getattr(store.validate_locator(x), 'topic', None)\nhasattr(s, 'holds_object')") == [
        (1, "topic"),
        (2, "holds_object"),
    ]


def test_the_sans_io_core_imports_no_client_and_no_policy() -> None:
    """``gateway/core`` and ``gateway/protocol`` run without confluent-kafka; the route kind comes from protocol."""
    leaks = []
    for name, path in modules().items():
        if not name.startswith(("gateway.core", "gateway.protocol")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                targets = [node.module or ""]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            leaks += [
                f"{name} imports {t}" for t in targets if t.split(".")[0] == "confluent_kafka" or t == "gateway.policy"
            ]
    assert leaks == []


def test_only_the_inbox_calls_the_librdkafka_consumer() -> None:
    """``gateway/consumer/_inbox.py`` makes and holds librdkafka's ``Consumer``; the rest of the consumer asks it."""
    reaching = []
    for name, path in modules().items():
        if not name.startswith("gateway.consumer.") or name == "gateway.consumer._inbox":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "_consumer":
                reaching.append(f"{name}:{node.lineno} reads ._consumer")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Consumer":
                reaching.append(f"{name}:{node.lineno} makes a Consumer")
    assert reaching == []


_INBOX_BOOKKEEPING = frozenset({"close_counted", "_close_counted", "_step", "_move", "_drop_kept"})
_INBOX_STATE = frozenset({"counted", "kept", "deferred", "raw"})
_MUTATORS = frozenset({"append", "appendleft", "extend", "extendleft", "pop", "popleft", "clear", "remove", "rotate"})
_READERS = ("gateway.consumer.", "gateway.aio.", "gateway.core.", "gateway.spark.")


def batch_bookkeeping(source: str) -> list[tuple[int, str]]:
    """Where ``source`` takes an inbox step by hand: its bookkeeping named, or its state changed from outside."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in _INBOX_BOOKKEEPING:
            found.append((node.lineno, node.attr))
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in _INBOX_STATE:
                found.append((node.lineno, f"{target.attr} ="))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATORS
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr in _INBOX_STATE
        ):
            found.append((node.lineno, f"{node.func.value.attr}.{node.func.attr}()"))
    return found


def test_only_the_inbox_takes_its_steps() -> None:
    """Counting out a proven batch, keeping messages back, dropping a partition's records: each a step of the
    inbox (gateway.core.inbox_states), never placed by hand where records are taken."""
    placed = []
    for name, path in modules().items():
        if not name.startswith(_READERS) or name == "gateway.consumer._inbox":
            continue
        placed += [f"{name}:{line} {what}" for line, what in batch_bookkeeping(path.read_text())]
    assert placed == []


def test_a_hand_placed_inbox_step_is_found() -> None:
    source = (
        "pipeline.close_counted()\nqueue.counted = None\nself._inbox.raw.popleft()\n"
        "self.kept.append(m)\nraw.popleft()\n"
    )
    assert sorted(batch_bookkeeping(source)) == [
        (1, "close_counted"),
        (2, "counted ="),
        (3, "raw.popleft()"),
        (4, "kept.append()"),
    ]


# -- the core never calls up: no slot for a driver's callback, nothing wired after construction ------------
_WIRED_INTO = frozenset({"pipeline", "_pipeline", "commits", "_commits"})


def calls_up(source: str) -> list[tuple[int, str]]:
    """Where a core module declares a Protocol for a driver to implement or a callback attribute for one."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base).endswith("Protocol") for base in node.bases):
            found.append((node.lineno, f"class {node.name}(Protocol)"))
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Attribute)
            and "Callable" in ast.unparse(node.annotation)
        ):
            found.append((node.lineno, f"{ast.unparse(node.target)}: a callback slot"))
    return found


def wired_after_construction(source: str) -> list[tuple[int, str]]:
    """Where an attribute of a pipeline or of its commit translator is assigned from outside it."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        for target in targets:
            owner = target.value if isinstance(target, ast.Attribute) else None
            names = {n.attr for n in ast.walk(owner) if isinstance(n, ast.Attribute)} if owner is not None else set()
            names |= {n.id for n in ast.walk(owner) if isinstance(n, ast.Name)} if owner is not None else set()
            if names & _WIRED_INTO:
                found.append((node.lineno, ast.unparse(target)))
    return found


def test_the_core_never_calls_up_into_a_driver() -> None:
    """Issue 40: the core returns events and reads its own state; it holds no driver and no driver's callback."""
    found = []
    for name, path in modules().items():
        if name.startswith("gateway.core."):
            found += [f"{name}:{line} {what}" for line, what in calls_up(path.read_text())]
    assert found == []


def test_nothing_is_wired_into_a_pipeline_after_construction() -> None:
    """Collaborators are given at construction: no ``pipeline.x = ...`` / ``pipeline.commits.x = ...`` anywhere."""
    found = []
    for name, path in modules().items():
        found += [f"{name}:{line} {what}" for line, what in wired_after_construction(path.read_text())]
    assert found == []


def test_a_call_up_and_a_late_wiring_are_found() -> None:
    protocol = (
        "class Deferred(Protocol):\n    pass\n"
        "class T:\n    def __init__(self):\n        self.cb: Callable[[], None] | None = None\n"
    )
    assert calls_up(protocol) == [(1, "class Deferred(Protocol)"), (5, "self.cb: a callback slot")]
    wiring = "self._pipeline.commits.floor = f\npipeline.x += 1\nself.y = 2\nbatch.left -= 1\n"
    assert wired_after_construction(wiring) == [(1, "self._pipeline.commits.floor"), (2, "pipeline.x")]
