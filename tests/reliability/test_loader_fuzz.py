"""Fuzzed inputs, seeded: 600 metadata.json mutations through `get_local_kernel` and 600 build.toml mutations
through `load_config`. Every outcome is a load or a typed `HubkernelsError`; never a traceback."""

from __future__ import annotations

import copy
import json
import random
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import hubkernels
from hubkernels.config import load_config
from hubkernels.errors import HubkernelsError, MetadataError

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261201
CASES = 600

BASE_METADATA: dict[str, Any] = {
    "name": "fuzz-me",
    "id": "_fuzz_me_cpu_1a2b3c4",
    "version": 1,
    "license": "Apache-2.0",
    "upstream": "https://example.org/fuzz-me.git",
    "python-depends": [],
    "kernel-depends": [],
    "backend": {"type": "cpu"},
    "digest": {"algorithm": "sha256", "files": {"__init__.py": "c2hhMjU2IG9mIHRoZSBpbml0IGZpbGUgZ29lcyBoZXJlIQ=="}},
    "provenance": {
        "kernel-builder": {"name": "hubkernels", "version": "0.1.0"},
        "kernel": {"commit": "b" * 40, "dirty": False},
    },
}


def _odd_value(rng: random.Random) -> Any:
    """A value of a random JSON type, often an extreme one."""
    choices = [
        None,
        True,
        False,
        0,
        -1,
        7,
        2**63,
        10**400,
        -(10**30),
        1.5,
        1e308,
        float("nan"),
        float("inf"),
        "",
        "x",
        "x" * 100_000,
        "../../etc/passwd",
        "/abs/path",
        "json",
        "torch",
        "os",
        "\u202e\u0000",
        "_fuzz_me_cpu_zzzzzzz",
        "_fuzz_me_cuda_1a2b3c4",
        "_fuzz_me_cpu_1a2b3c4_dirty",
        "_fuzz_me_cpu_abcdefghijklm",
        "9.0",
        "9.0a+PTX",
        "13.x",
        "sha512",
        "md5",
        [],
        [1, "a", None],
        ["einops"],
        ["helion"],
        ["no-such-dep"],
        [{"repo-id": "a/b", "version": 1}],
        [{"repo-id": 5}],
        {},
        {"type": "cuda", "archs": ["8.0", "bad"]},
        {"type": "cuda", "archs": "8.0"},
        {"type": "rocm", "archs": ["gfx942"]},
        {"type": "quantum"},
        {"files": []},
        {"files": {"../x": "AAAA"}},
        {"algorithm": "sha256", "files": {"a.py": 5}},
        list(range(5000)),
    ]
    pick = rng.randrange(len(choices) + 2)
    if pick == len(choices):
        deep: Any = 0
        for _ in range(rng.choice((20, 200, 500))):
            deep = [deep] if rng.random() < 0.5 else {"k": deep}
        return deep
    if pick == len(choices) + 1:
        return {f"k{i}": i for i in range(rng.choice((10, 10_000)))}
    return copy.deepcopy(choices[pick])


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


def _mutate_metadata(rng: random.Random) -> bytes:
    data = copy.deepcopy(BASE_METADATA)
    for _ in range(rng.choice((1, 1, 2, 3))):
        paths = _paths(data)
        if not paths or not isinstance(data, dict):
            break
        path = rng.choice(paths)
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        op = rng.random()
        if op < 0.25:
            del parent[path[-1]]
        elif op < 0.85:
            parent[path[-1]] = _odd_value(rng)
        elif isinstance(parent, dict):
            parent[f"extra-{rng.randrange(100)}"] = _odd_value(rng)
    if rng.random() < 0.05:
        data = _odd_value(rng)  # the whole document
    raw = json.dumps(data, allow_nan=True).encode()
    r = rng.random()
    if r < 0.08:
        raw = raw[: rng.randrange(len(raw) + 1)]
    elif r < 0.16:
        i = rng.randrange(len(raw))
        raw = raw[:i] + bytes([rng.randrange(256)]) + raw[i + 1 :]
    elif r < 0.20:
        raw = rng.choice(
            (b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe{}", b"1" * 5000, b'{"name": NaN}', b"", b"null")
        )
    return raw


def _outcome(fn, record_errors: Counter) -> str:  # type: ignore[no-untyped-def]
    try:
        fn()
        return "ok"
    except HubkernelsError as e:
        record_errors[type(e).__name__] += 1
        return "typed"
    except Exception:  # noqa: BLE001 - exactly what this test counts
        return traceback.format_exc(limit=3)


def test_600_fuzzed_metadata_json_give_no_traceback(tmp_path, record) -> None:
    rng = random.Random(SEED)
    errors: Counter = Counter()
    tracebacks: list[str] = []
    start = time.perf_counter()
    for i in range(CASES):
        variant = tmp_path / f"case{i}" / "build" / "torch-cpu"
        variant.mkdir(parents=True)
        (variant / "__init__.py").write_text("X = 1\n")
        raw = _mutate_metadata(rng)
        (variant / "metadata.json").write_bytes(raw)
        result = _outcome(lambda: hubkernels.get_local_kernel(variant.parent.parent), errors)
        if result not in ("ok", "typed"):
            tracebacks.append(f"case {i}: {raw[:200]!r}\n{result}")
    seconds = time.perf_counter() - start
    record(CASES, len(tracebacks), seed=SEED, seconds=round(seconds, 1), **{f"n_{k}": v for k, v in errors.items()})
    assert not tracebacks, f"{len(tracebacks)} tracebacks; first:\n" + "\n".join(tracebacks[:3])
    assert errors["MetadataError"] > CASES // 2  # the fuzzer does reach the schema


def test_metadata_errors_are_one_line_and_name_the_key(tmp_path) -> None:
    variant = tmp_path / "build" / "torch-cpu"
    variant.mkdir(parents=True)
    (variant / "__init__.py").write_text("X = 1\n")
    for key, value in (("version", "1"), ("backend", []), ("id", "json"), ("digest", {"files": {"/etc/x": "AA=="}})):
        data = {**BASE_METADATA, key: value}
        (variant / "metadata.json").write_text(json.dumps(data))
        try:
            hubkernels.get_local_kernel(tmp_path)
        except MetadataError as e:
            assert "\n" not in str(e) and str(variant / "metadata.json") in str(e) and f"'{key}" in str(e), str(e)
        else:
            raise AssertionError(f"{key}={value!r} was accepted")


_TOML_VALUES = (
    '"x"',
    '""',
    "1",
    "-1",
    "0",
    "99999999999999999999999",
    "1.5",
    "inf",
    "nan",
    "true",
    "[]",
    '["a", 1]',
    "{}",
    "{ a = 1 }",
    "1979-05-27T07:32:00Z",
    '"../../etc"',
    '["cpu", "cuda", "quantum"]',
    '"9.0"',
    '["8.0", "x"]',
    "[[1], [2]]",
    '"""multi\nline"""',
    "'literal'",
    '"\\u0000"',
)


def _mutate_toml(rng: random.Random, base: str) -> bytes:
    lines = base.splitlines()
    for _ in range(rng.choice((1, 1, 2, 4))):
        i = rng.randrange(len(lines))
        op = rng.random()
        if op < 0.2:
            del lines[i]
        elif op < 0.3:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op < 0.75 and "=" in lines[i]:
            key = lines[i].split("=", 1)[0]
            lines[i] = f"{key}= {rng.choice(_TOML_VALUES)}"
        elif op < 0.85 and lines[i].startswith("["):
            lines[i] = rng.choice(
                (
                    "[general]",
                    "[torch]",
                    "[kernel.x]",
                    "[[kernel]]",
                    "[kernel.ltx_cpu.extra]",
                    "[torch-noarch]",
                    "[tvm-ffi]",
                    "[general.cuda]",
                    "[general.hub]",
                    "[x",
                )
            )
        else:
            lines.insert(
                i, f"{rng.choice(('name', 'backend', 'src', 'depends', 'version', 'zzz'))} = {rng.choice(_TOML_VALUES)}"
            )
    raw = "\n".join(lines).encode()
    r = rng.random()
    if r < 0.1:
        raw = raw[: rng.randrange(len(raw) + 1)]
    elif r < 0.18:
        i = rng.randrange(len(raw))
        raw = raw[:i] + bytes([rng.randrange(256)]) + raw[i + 1 :]
    return raw


def test_600_fuzzed_build_toml_give_no_traceback(tmp_path, record) -> None:
    rng = random.Random(SEED)
    base = (ROOT / "build.toml").read_text()
    errors: Counter = Counter()
    tracebacks: list[str] = []
    start = time.perf_counter()
    for i in range(CASES):
        root = tmp_path / f"case{i}"
        root.mkdir()
        raw = _mutate_toml(rng, base)
        (root / "build.toml").write_bytes(raw)
        result = _outcome(lambda: load_config(root, validate_files=i % 2 == 0), errors)
        if result not in ("ok", "typed"):
            tracebacks.append(f"case {i}: {raw[:300]!r}\n{result}")
    seconds = time.perf_counter() - start
    record(CASES, len(tracebacks), seed=SEED, seconds=round(seconds, 1), **{f"n_{k}": v for k, v in errors.items()})
    assert not tracebacks, f"{len(tracebacks)} tracebacks; first:\n" + "\n".join(tracebacks[:3])
