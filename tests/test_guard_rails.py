"""The guard rails `./dev test` runs before pytest bite: an upward import planted in a copy of the package
breaks `lint-imports`, an unused import breaks `ruff check`, and docs/ARCHITECTURE.md's stage table says
exactly which stages each stage imports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FOUNDATION = {
    "settings",
    "platform",
    "system",
    "metadata",
    "digest",
    "elf",
    "errors",
    "_version",
    "layout",
    "hub",
}


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return str(path)


def _copy_tree(tmp_path: Path) -> Path:
    """The package, its pyproject.toml (the contracts, the ruff rules) and nothing else, in tmp_path."""
    shutil.copytree(ROOT / "hubkernels", tmp_path / "hubkernels", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _run(tool: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [_tool(tool), *(["check", "."] if tool == "ruff" else [])],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_tree_passes_both_checks():
    assert _run("lint-imports", ROOT).returncode == 0
    assert _run("ruff", ROOT).returncode == 0


def test_an_upward_import_breaks_the_stage_contract(tmp_path):
    tree = _copy_tree(tmp_path)
    assert _run("lint-imports", tree).returncode == 0
    config = tree / "hubkernels" / "config" / "model.py"
    planted = "\n\ndef _planted():\n    from ..integrations import diffusers  # noqa: F401\n"
    config.write_text(config.read_text() + planted)
    result = _run("lint-imports", tree)
    assert result.returncode != 0
    assert "hubkernels.config is not allowed to import hubkernels.integrations" in result.stdout


def test_reaching_into_layers_internals_breaks_the_surface_contract(tmp_path):
    tree = _copy_tree(tmp_path)
    target = tree / "hubkernels" / "integrations" / "transformers.py"
    planted = "\n\ndef _planted():\n    from ..layers.swap import load_layer  # noqa: F401\n"
    target.write_text(target.read_text() + planted)
    result = _run("lint-imports", tree)
    assert result.returncode != 0
    assert "Illegal imports of protected package hubkernels.layers.swap" in result.stdout


def test_an_unused_import_and_a_long_line_break_ruff(tmp_path):
    tree = _copy_tree(tmp_path)
    assert _run("ruff", tree).returncode == 0
    bad = tree / "hubkernels" / "errors.py"
    bad.write_text("import os\n" + bad.read_text() + "\nLONG = '" + "x" * 120 + "'\n")
    result = _run("ruff", tree)
    assert result.returncode != 0 and "F401" in result.stdout and "E501" in result.stdout


def _documented_stage_imports() -> dict[tuple[str, ...], set[str]]:
    """(modules of a row) -> the names in its imports column, from docs/ARCHITECTURE.md's stage table."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = text[text.index("| module | public functions | imports |") :].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        first, *_, last = [cell.strip() for cell in line.strip("|").split("|")]
        modules = tuple(m.removeprefix("hubkernels.") for m in re.findall(r"`(hubkernels\.[\w.]+)`", first))
        rows[modules] = {name.strip() for name in last.split(",")} - {"nothing"}
    return rows


def _real_stage_imports(modules: tuple[str, ...]) -> set[str]:
    """The top-level hubkernels modules that `modules` import (directly, from any of their submodules), foundation
    modules reported as "foundation", without the imports pyproject.toml lists as known and pending."""
    import grimp

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    pending = {tuple(p.strip() for p in rule.split("->")) for c in contracts for rule in c.get("ignore_imports", [])}
    graph = grimp.build_graph("hubkernels")
    found = set()
    for module in modules:
        for importer in {f"hubkernels.{module}"} | graph.find_descendants(f"hubkernels.{module}"):
            for imported in graph.find_modules_directly_imported_by(importer):
                if (importer, imported) in pending:
                    continue
                top = imported.split(".")[1] if imported.count(".") else None
                if top is None or top in modules:
                    continue
                found.add("foundation" if top in FOUNDATION else top)
    return found


def test_the_architecture_stage_table_is_the_real_imports():
    rows = _documented_stage_imports()
    assert len(rows) >= 10
    for modules, documented in rows.items():
        assert _real_stage_imports(modules) == documented, modules
    # Every module of the package is in the table or among the foundation modules.
    listed = {m for modules in rows for m in modules} | FOUNDATION | {"__main__"}
    package = {
        p.stem if p.is_file() else p.name
        for p in (ROOT / "hubkernels").iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "__init__.py"
    }
    assert package <= listed, package - listed


def test_every_error_class_is_a_hubkernels_error_reachable_from_the_package():
    """One rule (hubkernels/errors.py): each error class derives from HubkernelsError, so the CLI turns it into exit
    status 2, and `hubkernels.<Name>` reaches it wherever it is defined."""
    import importlib
    import pkgutil

    import hubkernels
    from hubkernels.errors import HubkernelsError

    found = {}
    for info in pkgutil.walk_packages(hubkernels.__path__, "hubkernels."):
        if info.name.endswith("__main__") or ".skill." in info.name:
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and not name.startswith("_")
            ):  # private ones steer control flow inside a module
                found[name] = value
    assert len(found) >= 16, sorted(found)
    for name, cls in found.items():
        assert issubclass(cls, HubkernelsError), name
        assert getattr(hubkernels, name) is cls, name


def test_tests_share_helpers_through_modules_not_through_each_other():
    """A test module importing another (or a conftest, whose name several directories share) drags in its
    fixtures and tests; shared code lives in tests/helpers.py (and the ltx_* and hubfixture modules)."""
    offenders = [
        f"{path.name}: {line.strip()}"
        for path in sorted((ROOT / "tests").glob("*.py"))
        for line in path.read_text().splitlines()
        if re.match(r"\s*(from|import)\s+(test_\w+|conftest)\b", line)
    ]
    assert offenders == []


#: Modules that are a process's own entry point, with why they write to stdout.
ENTRY_POINTS = {
    "builder/_setup_ext.py": "the compile step's own process: its one `error:` line is how builder.compile learns why",
}


def _stage_modules() -> list[Path]:
    """Every module of the library but the CLI's, the process entry points and the kernel templates the skill
    ships to users."""
    package = ROOT / "hubkernels"
    skip = (package / "cli", package / "author" / "skill" / "templates", *(package / p for p in ENTRY_POINTS))
    return [p for p in sorted(package.rglob("*.py")) if not any(p.is_relative_to(s) for s in skip)]


def _argparse_and_prints(path: Path) -> list[str]:
    """`file:line: what` for each argparse import and each print() call in one module."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            found.append(f"{path.name}:{node.lineno}: import argparse")
        elif isinstance(node, ast.ImportFrom) and node.module == "argparse":
            found.append(f"{path.name}:{node.lineno}: from argparse import")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"{path.name}:{node.lineno}: print()")
    return found


def test_only_the_cli_parses_arguments_and_prints():
    """Each command's arguments, help and output live in hubkernels/cli/<command>.py; stages return values."""
    found = [f"{p.parent.relative_to(ROOT)}/{line}" for p in _stage_modules() for line in _argparse_and_prints(p)]
    assert not found, "argparse or print() outside hubkernels/cli/:\n" + "\n".join(found)


def test_the_cli_guard_sees_a_planted_parser_and_print(tmp_path):
    planted = tmp_path / "stage.py"
    planted.write_text("import argparse\n\n\ndef run():\n    print('done')\n")
    assert _argparse_and_prints(planted) == ["stage.py:1: import argparse", "stage.py:5: print()"]
