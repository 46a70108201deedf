"""`hubkernels.layout` is the one place that spells where a kernel's variants, wheels and source live, locally and
on a Hub version branch; nothing else in the package writes those paths out."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hubkernels import layout
from hubkernels.errors import VariantNotFoundError
from hubkernels.system import Variant

PACKAGE = Path(layout.__file__).resolve().parent
VARIANT = "torch212-cxx11-cu130-x86_64-linux"


def test_a_variant_and_its_artifacts_have_one_path_each_on_the_hub():
    assert layout.hub_variant_path(VARIANT) == f"build/{VARIANT}"
    assert layout.hub_variant_file(VARIANT, "ltx/_ops.py") == f"build/{VARIANT}/ltx/_ops.py"
    assert layout.hub_wheel_dir(VARIANT) == f"wheels/{VARIANT}"
    wheel = "ltx_kernels-1-cp310-abi3-manylinux_2_28_x86_64-torch212_cu130.whl"
    assert layout.hub_wheel_file(VARIANT, wheel) == f"wheels/{VARIANT}/{wheel}"
    assert layout.hub_variants_index("ltx_kernels", 1) == "wheels/ltx_kernels-1-variants.json"
    assert layout.hub_source_file("kernel_src/ltx_cuda/rms_norm.cu") == "source/kernel_src/ltx_cuda/rms_norm.cu"
    # a parsed Variant names the same directory as its string
    assert layout.hub_variant_path(Variant.parse(VARIANT)) == f"build/{VARIANT}"


@pytest.mark.parametrize(
    "path, variant",
    [
        (f"build/{VARIANT}/metadata.json", VARIANT),
        (f"build/{VARIANT}/ltx_kernels/layers/__init__.py", VARIANT),
        (f"wheels/{VARIANT}/ltx_kernels-1-cp310-abi3-manylinux_2_28_x86_64-cu130.whl", VARIANT),
        ("wheels/ltx_kernels-1-variants.json", None),  # the index beside the wheel directories
        ("source/build.toml", None),
        ("README.md", None),
        ("build/stray-file", None),  # a file directly under build/ is no variant
        ("builds/x/metadata.json", None),
    ],
)
def test_the_variant_a_repo_path_belongs_to(path, variant):
    assert layout.hub_variant_of(path) == variant


def test_paths_read_back_to_their_variant_and_directory():
    for path in (layout.hub_variant_file(VARIANT, "metadata.json"), layout.hub_wheel_file(VARIANT, "x.whl")):
        assert layout.hub_variant_of(path) == VARIANT
    assert layout.hub_under(layout.hub_variant_file(VARIANT, "a.py"), layout.hub_variant_path(VARIANT))
    assert not layout.hub_under(f"build/{VARIANT}-other/a.py", layout.hub_variant_path(VARIANT))
    assert layout.hub_under(layout.hub_wheel_file(VARIANT, "x.whl"), layout.hub_wheel_dir(VARIANT))
    assert not layout.hub_under(layout.hub_variants_index("d", 1), layout.hub_wheel_dir(VARIANT))


def test_a_kernel_roots_builds_are_found_where_build_writes_them(tmp_path):
    built = layout.variant_dir(tmp_path, VARIANT)
    assert built == tmp_path / "build" / VARIANT
    assert layout.build_dir(tmp_path) == built.parent
    built.mkdir(parents=True)
    (built / layout.METADATA).write_text("{}")
    base, found = layout.variant_dirs(tmp_path)
    assert base == tmp_path / "build" and found == {VARIANT: built}
    assert layout.torch_ext_dir(tmp_path) == tmp_path / "torch-ext"
    assert layout.source_dir(tmp_path) == tmp_path / "source"


def test_a_root_without_builds_says_to_build(tmp_path):
    with pytest.raises(VariantNotFoundError, match="Run `hubkernels build"):
        layout.variant_dirs(tmp_path)


# -- the rule: no other module spells these paths ------------------------------------------------------------

_DIRS = (layout.BUILD_DIR, layout.WHEELS_DIR, layout.SOURCE_DIR, layout.TORCH_EXT_DIR)
#: A path that starts with one of the directories (at the start of the text or after a `/`), e.g. `build/x`.
_PATH_TEXT = re.compile(r"(?:^|/)(?:" + "|".join(re.escape(d) for d in _DIRS) + r")/")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def variant_path_literals(source: str, filename: str = "<source>") -> list[str]:
    """`line: text` of each place in `source` that spells a variant path: a string (or f-string piece) starting
    with `build/`, `wheels/`, `source/` or `torch-ext/`, or one of those names joined onto a path (`p / "build"`,
    `path_in_repo="build"`); docstrings are prose and left out."""
    tree = ast.parse(source, filename)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            pieces = [v for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if any(_PATH_TEXT.match(p.value) or p.value.endswith(tuple(f"/{d}/" for d in _DIRS)) for p in pieces):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
            for p in pieces:  # its pieces are not strings of their own
                docs.add(id(p))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if isinstance(node.right, ast.Constant) and node.right.value in _DIRS:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.keyword) and node.arg == "path_in_repo":
            if isinstance(node.value, ast.Constant) and node.value.value in _DIRS:
                found.append(f"{node.value.lineno}: {ast.unparse(node)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if _PATH_TEXT.match(node.value):
                found.append(f"{node.lineno}: {node.value!r}")
    return found


def test_no_module_but_layout_spells_a_variant_path():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "layout.py" or rel.startswith("skill/templates/"):  # the templates are a kernel's own files
            continue
        offenders += [f"hubkernels/{rel}:{hit}" for hit in variant_path_literals(path.read_text(), rel)]
    assert offenders == [], "use hubkernels.layout's functions instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "planted",
    [
        'prefix = f"build/{variant}/"',
        'index = f"wheels/{dist}-{version}-variants.json"',
        'target = "source/" + rel',
        "out = root / 'build' / variant",
        'api.list_repo_tree(repo_id, path_in_repo="build")',
        'where = f"{snapshot}/build/{variant}"',
        'pkg = root / "torch-ext"',
    ],
)
def test_the_rule_catches_a_planted_path(planted):
    assert variant_path_literals(f'"""Docstrings may say build/<variant>/."""\n\n{planted}\n')


def test_the_rule_leaves_prose_and_other_words_alone():
    source = (
        '"""Writes build/<variant>/."""\n'
        'NAME = "build"\n'
        'msg = f"check that {root} and its build/ and _build/ are writable"\n'
        'hint = "the wheels/ directory"\n'
    )
    assert variant_path_literals(source) == []
