"""The agent skill: an agent can read SKILL.md, every file it points to ships, `hubkernels skill install`
puts it where agents look, and the kernel template does what the skill says: scaffolded with the skill's
own commands it builds, matches its float64 reference, traces under torch.compile, passes its own tests,
benchmarks, and publishes to a Hub and loads back.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hubkernels.author.skill_install import SkillInstallError, install_skill, skill_dir

SKILL = skill_dir()
DOCS = [SKILL / "SKILL.md", *sorted((SKILL / "references").glob("*.md"))]
TEMPLATE_NAMES = re.compile(r"my_kernels|my-kernels|MY_KERNELS")


def frontmatter(text: str) -> dict[str, str]:
    """The `key: value` lines between the opening and closing `---` of a skill file."""
    assert text.startswith("---\n"), "SKILL.md must open with a --- frontmatter line"
    head, sep, _ = text[4:].partition("\n---\n")
    assert sep, "SKILL.md's frontmatter has no closing --- line"
    fields = {}
    for line in head.splitlines():
        key, colon, value = line.partition(":")
        assert colon and key.strip() and value.strip(), f"frontmatter line is not `key: value`: {line!r}"
        fields[key.strip()] = value.strip()
    return fields


_ARTEFACTS = {"__pycache__", "build", "_build", ".pytest_cache"}


def shipped_files(root: Path) -> dict[str, bytes]:
    """{relative path: bytes} of the skill's files under `root`, leaving out build and test artefacts."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not _ARTEFACTS & set(p.relative_to(root).parts)
        and p.name != "_ops.py"
        and p.suffix != ".pyc"
    }


def installed_files(root: Path) -> dict[str, bytes]:
    """{relative path: bytes} of every file under `root`, artefacts included."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------------
# SKILL.md and its references


def test_skill_md_has_the_frontmatter_agents_read():
    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    meta = frontmatter(text)
    assert set(meta) == {"name", "description"}
    assert meta["name"] == "hubkernels"
    assert re.fullmatch(r"[a-z0-9-]{1,64}", meta["name"])
    assert 50 <= len(meta["description"]) <= 1024
    assert "<" not in meta["description"] and ">" not in meta["description"]
    assert "Use when" in meta["description"], "the description must say when to use the skill"
    assert len(text.splitlines()) <= 250, "SKILL.md is the short entry point; move detail to references/"


def _mentioned_paths(doc: Path) -> list[tuple[str, Path]]:
    """(as written, where it must exist) for every relative path a skill document names."""
    text = doc.read_text(encoding="utf-8")
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):  # markdown links, relative to the document
        if not re.match(r"[a-z]+:|#", target):
            found.append((target, doc.parent / target.split("#")[0]))
    # Paths into the skill (references/, templates/) and into the template (kernel_src/, tests/,
    # benchmarks/), in prose and in code; placeholders such as <op> end the check there.
    for m in re.finditer(r"(?<![\w$./-])(references|templates|kernel_src|tests|benchmarks)/[\w./-]*", text):
        if m.end() < len(text) and text[m.end()] in "<*{":
            continue
        token = m.group(0).rstrip(".,")
        base = SKILL if m.group(1) in ("references", "templates") else SKILL / "templates"
        found.append((token, base / token))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(SKILL).as_posix())
def test_every_path_a_skill_document_names_ships_with_it(doc):
    mentioned = _mentioned_paths(doc)
    assert mentioned or doc.name != "SKILL.md"
    missing = [written for written, path in mentioned if not path.exists()]
    assert not missing, f"{doc.name} names paths that do not exist in the skill: {missing}"


def test_skill_md_points_to_every_reference():
    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    for ref in (SKILL / "references").glob("*.md"):
        assert f"references/{ref.name}" in text, f"SKILL.md never points to references/{ref.name}"


# ---------------------------------------------------------------------------------------------------
# hubkernels skill install / path


def test_install_copies_the_whole_skill(tmp_path):
    dest = install_skill(tmp_path / "project" / ".claude" / "skills" / "hubkernels")
    assert dest == (tmp_path / "project" / ".claude" / "skills" / "hubkernels").absolute()
    assert installed_files(dest) == shipped_files(SKILL)
    assert {"SKILL.md", "templates/build.toml", "references/cuda-patterns.md"} <= set(installed_files(dest))


def test_install_refuses_to_overwrite_unless_forced(tmp_path):
    dest = install_skill(tmp_path / "hubkernels")
    (dest / "notes.txt").write_text("an earlier install's leftovers")
    with pytest.raises(SkillInstallError, match="--force"):
        install_skill(dest)
    assert (dest / "notes.txt").exists()
    install_skill(dest, force=True)
    assert not (dest / "notes.txt").exists(), "--force replaces the earlier install entirely"
    assert installed_files(dest) == shipped_files(SKILL)
    assert not list(tmp_path.glob(".hubkernels.*")), "no staging folder is left behind"


def test_force_never_deletes_a_folder_that_is_not_a_skill_install(tmp_path):
    dest = tmp_path / "work"
    dest.mkdir()
    (dest / "main.py").write_text("print('mine')")
    with pytest.raises(SkillInstallError, match="not a hubkernels skill install"):
        install_skill(dest, force=True)
    assert (dest / "main.py").read_text() == "print('mine')"


def test_install_leaves_out_build_artefacts(tmp_path, monkeypatch):
    import hubkernels.author.skill_install as skill_cli

    fake = tmp_path / "skill"
    shutil.copytree(SKILL, fake)
    for junk in (
        "templates/build/v/x.so",
        "templates/_build/v/obj.o",
        "templates/tests/__pycache__/t.pyc",
        "templates/kernel_src/torch-ext/my_kernels/_ops.py",
    ):
        (fake / junk).parent.mkdir(parents=True, exist_ok=True)
        (fake / junk).write_text("artefact")
    monkeypatch.setattr(skill_cli, "skill_dir", lambda: fake)
    dest = install_skill(tmp_path / "out")
    assert installed_files(dest) == shipped_files(SKILL)


def _cli():
    """hubkernels.cli.main, once the CLI loads hubkernels.author.skill_install."""
    from hubkernels.cli import main, make_parser

    commands = next(a for a in make_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert "skill" in commands.choices, "`hubkernels skill` is missing from the CLI"
    return main


def test_cli_installs_for_claude_codex_and_opencode_and_refuses_a_second_time(tmp_path, monkeypatch, capsys):
    main = _cli()
    monkeypatch.chdir(tmp_path)
    assert main(["skill", "install"]) == 0
    assert (tmp_path / ".claude/skills/hubkernels/SKILL.md").is_file()
    assert main(["skill", "install", "--codex"]) == 0
    assert (tmp_path / ".codex/skills/hubkernels/templates/build.toml").is_file()
    assert main(["skill", "install", "--opencode"]) == 0
    assert installed_files(tmp_path / ".opencode/skills/hubkernels") == shipped_files(SKILL)
    capsys.readouterr()
    assert main(["skill", "install"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--force" in err
    assert main(["skill", "install", "--force"]) == 0
    assert main(["skill", "install", "--dest", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere/SKILL.md").is_file()


def test_cli_path_prints_the_skill_folder(capsys):
    main = _cli()
    assert main(["skill", "path"]) == 0
    assert Path(capsys.readouterr().out.strip()) == SKILL


# ---------------------------------------------------------------------------------------------------
# The template, scaffolded with SKILL.md's own commands, outside this repository


def _scaffold_script() -> str:
    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    section = text.split("## 1. Scaffold", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "SKILL.md's Scaffold section has no bash block"
    return re.sub(r"(?m)^hubkernels ", f"{sys.executable} -m hubkernels ", block.group(1))


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory) -> Path:
    """The template copied, renamed to fast-norms and committed by SKILL.md's scaffold commands."""
    work = tmp_path_factory.mktemp("skill-scaffold")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _scaffold_script()], cwd=work, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"the scaffold commands failed:\n{done.stdout}\n{done.stderr}"
    return work / "fast-norms"


@pytest.fixture(scope="module")
def built(kernel_dir):
    from hubkernels.builder import build

    return build(kernel_dir, backend="cpu", quiet=True)


@pytest.fixture(scope="module")
def fast_norms(built):
    import hubkernels

    return hubkernels.get_local_kernel(built.path, backend="cpu")


def test_the_shipped_template_build_toml_is_valid():
    from hubkernels.config import load_config

    config = load_config(SKILL / "templates")
    assert config.name == "my-kernels" and config.python_name == "my_kernels"
    assert config.general.backends == ("cpu", "cuda") and config.general.edition == 5
    assert [k.name for k in config.kernels_for("cpu")] == ["my_kernels_cpu"]
    assert [k.name for k in config.kernels_for("cuda")] == ["my_kernels_cuda"]
    assert config.package_dir == SKILL / "templates/kernel_src/torch-ext/my_kernels"


def test_scaffold_renames_everything(kernel_dir):
    from hubkernels.config import load_config

    leftovers = [
        p.relative_to(kernel_dir).as_posix()
        for p in kernel_dir.rglob("*")
        if ".git" not in p.parts
        and (TEMPLATE_NAMES.search(p.name) or (p.is_file() and TEMPLATE_NAMES.search(p.read_text(encoding="utf-8"))))
    ]
    assert not leftovers, f"template names left after the scaffold: {leftovers}"
    config = load_config(kernel_dir)
    assert (config.name, config.python_name) == ("fast-norms", "fast_norms")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=kernel_dir, capture_output=True, text=True)
    assert status.stdout == "", "the scaffold commits everything"


def test_template_builds_with_a_namespace_of_its_own(built, kernel_dir):
    tree = subprocess.run(
        ["git", "rev-parse", "HEAD^{tree}"], cwd=kernel_dir, capture_output=True, text=True
    ).stdout.strip()
    assert built.id == f"_fast_norms_cpu_{tree[:7]}"
    assert (built.path / f"{built.id}.abi3.so").is_file() and (built.path / "metadata.json").is_file()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [7, 2048])
def test_template_op_matches_float64_reference(fast_norms, dtype, dim):
    x = torch.randn(4, 3, dim) * 3
    w = torch.randn(dim)
    x, w = x.to(dtype), w.to(dtype)
    x64 = x.double()
    expected = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    out = fast_norms.rms_norm(x, w, 1e-6)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)


def test_template_op_traces_under_torch_compile_fullgraph(fast_norms):
    torch._dynamo.reset()

    def f(x: torch.Tensor) -> torch.Tensor:
        return fast_norms.rms_norm(x + 1, None, 1e-5) * 3

    x = torch.randn(8, 512)
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), f(x))


@pytest.mark.slow
def test_template_passes_its_own_tests(kernel_dir, built):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider"],
        cwd=kernel_dir,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed and int(passed.group(1)) >= 40, done.stdout[-2000:]


def test_template_benchmark_runs_against_its_peers_in_every_dtype(kernel_dir, built, tmp_path):
    """The template's benchmark declaration, run by `hubkernels bench` on a CPU: ours beside eager, F.rms_norm
    and torch.compile, with errors at each dtype's rounding."""
    from hubkernels.cli import main

    for dtype in ("fp32", "bf16", "fp16"):
        out = tmp_path / f"bench-{dtype}.json"
        assert (
            main(
                [
                    "bench",
                    str(kernel_dir),
                    "--device",
                    "cpu",
                    "--dtype",
                    dtype,
                    "--shape",
                    "tokens=32",
                    "--warmup",
                    "1",
                    "--iters",
                    "3",
                    "--no-compile",
                    "--output",
                    str(out),
                ]
            )
            == 0
        )
        report = json.loads(out.read_text())
        assert [r["impl"] for r in report["rows"]] == ["ours", "eager", "F.rms_norm"]
        assert report["copy_gbps"] > 0 and report["shape"] == [2, 32, 2048]
        for row in report["rows"]:
            assert row["median_us"] > 0 and row["pct_copy_bw"] > 0
            assert row["max_rel_err"] < (1e-5 if dtype == "fp32" else 1e-2), row


def test_template_publishes_and_loads_back_from_a_hub(hub, kernel_dir, built):
    import hubkernels
    from hubkernels.publish import upload

    result = upload(kernel_dir, repo_id="skill-test/fast-norms")
    assert result.branch == "v1" and result.variants == (str(built.variant),)
    loaded = hubkernels.get_kernel("skill-test/fast-norms", version=1, backend="cpu", trust_remote_code=True)
    x = torch.randn(2, 5, 64)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(loaded.rms_norm(x), expected)
    assert "rms_norm" in loaded.__all__ and hasattr(loaded.layers, "RMSNorm")


def test_the_cpu_guide_has_every_section_verify_points_to():
    """A speed failure names the section of the CPU guide with the fix; each must be there to be read."""
    from hubkernels.author.skill_install import skill_dir
    from hubkernels.author.verify.diagnose import SECTIONS

    guide = (skill_dir() / "references/cpu-translation.md").read_text(encoding="utf-8")
    headings = re.findall(r"(?m)^#+ (.+)$|^- \*\*(\w+)", guide)
    found = {h or b for h, b in headings}
    for section in SECTIONS.values():
        assert any(section in h for h in found), f"the CPU guide lost its {section!r} section"


# silu_and_mul on the template's lanes.h: the formula once on f32x16, a clamp written with where().
LANES_SILU_AND_MUL = """
#include "lanes.h"
namespace my_kernels_cpu {
template <typename Isa>
MY_KERNELS_INLINE f32x16 silu(Isa isa, f32x16 g) {
  const f32x16 lo = f32x16{} - 80.0f;
  const f32x16 z = where(isa, kLess, g, lo, lo, g);  // clamp the operand, before the one division
  f32x16 e = f32x16{} + 1.0f;  // exp(-z) ~ by (1 - z/256)^256: enough for a compile test
  const f32x16 s = 1.0f - z * (1.0f / 256);
  e = s;
  for (int k = 0; k < 8; ++k) e = e * e;
  return g / (1.0f + e);
}
void silu_and_mul(float* out, const float* x, int64_t rows, int64_t d) {
  run_on_cpu([&](auto isa) MY_KERNELS_ALWAYS_INLINE {
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = x + r * 2 * d;
      for (int64_t i = 0; i < d; i += kVecLanes) {
        const int64_t n = d - i < kVecLanes ? d - i : kVecLanes;
        store16(out + r * d + i, silu(isa, load16(g + i, n)) * load16(g + d + i, n), n);
      }
    }
  });
}
}  // namespace my_kernels_cpu
extern "C" void silu_and_mul(float* out, const float* x, int64_t rows, int64_t d) {
  my_kernels_cpu::silu_and_mul(out, x, rows, d);
}
"""


def test_the_templates_lanes_header_compiles_each_isa_without_lane_by_lane_compares(tmp_path):
    """The template's next step (lanes.h): one formula on 16 fp32 lanes, a runner per ISA, compares in pieces of
    the ISA's registers: verify's vector check passes every runner at its width, none compares lane by lane, and
    the runner this CPU picks computes the formula."""
    import ctypes

    import torch

    from hubkernels.author.skill_install import skill_dir
    from hubkernels.author.verify import vector

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None or shutil.which("objdump") is None:
        pytest.skip("needs a C++ compiler and objdump")
    src = skill_dir() / "templates/kernel_src/my_kernels_cpu"
    (tmp_path / "silu.cpp").write_text(LANES_SILU_AND_MUL)
    subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-O3",
            "-fno-trapping-math",
            "-Wno-psabi",
            "-fPIC",
            "-shared",
            f"-I{src}",
            str(tmp_path / "silu.cpp"),
            "-o",
            str(tmp_path / "silu.so"),
        ],
        check=True,
    )
    found = {c.subject: c for c in vector.check_vectorised(tmp_path, ["my_kernels_cpu"])}
    for isa, width in (("avx512", 512), ("avx2", 256), ("baseline", 128)):
        c = found[f"my_kernels_cpu::silu_and_mul [{isa}]"]
        assert c.status == "pass" and c.data["isa_width"] == width, c.line()
        assert c.data["mix"]["compares"] == 0 and c.data["mix"]["extracts"] == 0, c.line()
    x = torch.randn(3, 2 * 40)
    out = torch.empty(3, 40)
    lib = ctypes.CDLL(str(tmp_path / "silu.so"))
    lib.silu_and_mul(
        ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(x.data_ptr()), ctypes.c_int64(3), ctypes.c_int64(40)
    )
    g, u = x.chunk(2, dim=-1)
    torch.testing.assert_close(out, torch.nn.functional.silu(g) * u, rtol=2e-2, atol=2e-2)
