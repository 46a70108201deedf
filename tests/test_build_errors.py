"""A build that cannot succeed says why in one line (exit 2), or shows the compiler's output (exit 1).

Never a Python traceback: a broken compiler, a syntax error, missing sources or package, a backend the
installed torch cannot compile, unwritable output, bad arguments. The fuzz test draws ~100 such inputs
from a recorded seed and runs each through the `hubkernels build` command line.
"""

from __future__ import annotations

import contextlib
import io
import random
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hubkernels.cli import main

MINI = Path(__file__).parent / "fixtures" / "mini"
SEED = 20261201


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`hubkernels build ...` in this process: (exit status, stderr); an escaping exception fails the test."""
    err = io.StringIO()
    with monkeypatch.context() as m, contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        for key, value in (env or {}).items():
            m.setenv(key, value)
        try:
            code = main(["build", *argv])
        except SystemExit as e:  # argparse's usage errors: one line, exit 2
            code = e.code if isinstance(e.code, int) else 2
    return code, err.getvalue()


def mini_copy(tmp_path: Path, name: str = "mini") -> Path:
    dest = tmp_path / name
    shutil.copytree(MINI, dest, ignore=shutil.ignore_patterns("build", "_build"))
    return dest


def broken_compiler(tmp_path: Path, message: str) -> Path:
    """A `c++` that prints `message` and fails, as a broken or misconfigured toolchain does."""
    cc = tmp_path / "broken-cc"
    cc.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    return cc


def test_syntax_error_shows_the_compiler_output_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = mini_copy(tmp_path)
    (kernel / "mini_cpu" / "relu.cpp").write_text("this is not C++;\n")
    (kernel / "torch-ext" / "torch_binding.cpp").write_text("#error planted\n")
    code, err = run_cli([str(kernel)], monkeypatch)
    assert code == 1 and "relu.cpp" in err and "error" in err and "Traceback" not in err


def test_broken_compiler_exits_1_with_its_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = mini_copy(tmp_path)
    cc = broken_compiler(tmp_path, "cc1plus: internal error: planted")
    code, err = run_cli([str(kernel)], monkeypatch, {"CXX": str(cc), "CC": str(cc)})
    assert code == 1 and "Traceback" not in err
    assert "planted" in err or "compilation failed" in err


def test_cuda_build_with_a_cpu_only_torch_names_the_fix() -> None:
    import torch

    if torch.version.cuda:
        pytest.skip("this torch is a CUDA build")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "hubkernels",
            "build",
            str(Path(__file__).parent / "fixtures" / "upstream" / "relu"),
            "--backend",
            "cuda",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cpu-only build" in lines[0] and "install a CUDA build of torch" in lines[0]


def _one_line_error(err: str) -> bool:
    """The output ends with exactly one `error:` line (progress lines such as "Building ..." may precede it)."""
    lines = err.strip().splitlines()
    return bool(lines) and "error:" in lines[-1] and sum("error" in line for line in lines) == 1


def _case(rng: random.Random, tmp_path: Path, i: int) -> tuple[list[str], dict[str, str], set[int]]:
    """One bad build input: (argv, env, allowed exit statuses)."""
    kernel = mini_copy(tmp_path, f"k{i}")
    kind = rng.choice(
        [
            "missing-src",
            "missing-binding",
            "missing-package",
            "backend",
            "garbage-src",
            "compiler",
            "bad-path",
            "build-is-file",
            "jobs",
            "garbage-toml",
            "src-is-dir",
        ]
    )
    if kind == "missing-src":
        (kernel / "mini_cpu" / "relu.cpp").unlink()
        return [str(kernel)], {}, {2}
    if kind == "missing-binding":
        (kernel / "torch-ext" / "torch_binding.cpp").unlink()
        return [str(kernel)], {}, {2}
    if kind == "missing-package":
        (kernel / "torch-ext" / "mini_relu" / "__init__.py").unlink()
        return [str(kernel)], {}, {2}
    if kind == "backend":
        name = rng.choice(["cuda", "rocm", "metal", "xpu", "tpu", "", "CPU", "cpu ", "x" * rng.randint(1, 300)])
        return [str(kernel), "--backend", name], {}, {2}
    if kind == "garbage-src":
        junk = "".join(rng.choice("{}();<>#abc\n\x00") for _ in range(rng.randint(1, 200)))
        (kernel / "mini_cpu" / "relu.cpp").write_text("#error planted\n" + junk, errors="replace")
        (kernel / "torch-ext" / "torch_binding.cpp").write_text("#error planted\n")
        return [str(kernel)], {}, {1}
    if kind == "compiler":
        choice = rng.choice(["script", "missing", "not-executable", "directory"])
        if choice == "script":
            cc = broken_compiler(tmp_path, f"planted failure {i}")
        elif choice == "not-executable":
            cc = tmp_path / f"cc{i}.txt"
            cc.write_text("not a compiler\n")
        else:
            cc = tmp_path / "no-such-compiler" if choice == "missing" else tmp_path
        return [str(kernel)], {"CXX": str(cc), "CC": str(cc)}, {1, 2}
    if kind == "bad-path":
        return (
            [
                rng.choice(
                    [str(tmp_path / "nope"), str(kernel / "build.toml" / "x"), "/dev/null", str(kernel / "mini_cpu")]
                )
            ],
            {},
            {2},
        )
    if kind == "build-is-file":
        target = rng.choice(["build", "_build"])
        (kernel / target).write_text("not a directory\n")
        return [str(kernel)], {}, {2}
    if kind == "jobs":
        return [str(kernel), "-j", rng.choice(["0", "-3", "x", "1.5"])], {}, {2}
    if kind == "src-is-dir":
        (kernel / "mini_cpu" / "relu.cpp").unlink()
        (kernel / "mini_cpu" / "relu.cpp").mkdir()
        return [str(kernel)], {}, {2}
    toml = kernel / "build.toml"
    data = bytearray(toml.read_bytes())
    for _ in range(rng.randint(1, 5)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    toml.write_bytes(bytes(data) + b"\n[unclosed\n")  # always invalid: a valid mutation would compile for minutes
    return [str(kernel)], {}, {2}


def test_fuzzed_bad_build_inputs_never_give_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(SEED)
    failures = []
    for i in range(100):
        argv, env, allowed = _case(rng, tmp_path, i)
        try:
            code, err = run_cli(argv, monkeypatch, env)
        except Exception as e:  # noqa: BLE001  (this is what the test counts)
            failures.append(f"case {i} {argv} {env}: {type(e).__name__}: {e}")
            continue
        if code not in allowed or "Traceback" in err:
            failures.append(f"case {i} {argv} {env}: exit {code}\n{err[-800:]}")
        elif code == 2 and not _one_line_error(err):
            failures.append(f"case {i} {argv} {env}: exit 2 but not one error line:\n{err[-800:]}")
    assert not failures, f"seed {SEED}: {len(failures)} bad outcomes\n" + "\n".join(failures[:5])
