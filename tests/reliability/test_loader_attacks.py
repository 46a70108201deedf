"""Attacks on the loader, one per hole (module-name injection, trust by keys, poisoned bytecode, a hub that
names files outside the cache). Each is written as the attack and asserts the user's process stays safe."""

from __future__ import annotations

import http.server
import importlib.util
import json
import marshal
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from helpers import make_kernel, new_repo, without_artifacts

import hubkernels
from hubkernels.errors import KernelLoadError, MetadataError, UsageError
from hubkernels.fetch import DownloadError, get_kernel
from hubkernels.fetch.cache import RepoState
from hubkernels.fetch.install import install
from hubkernels.metadata import Metadata
from hubkernels.publish import upload

ROOT = Path(__file__).resolve().parents[2]


def _variant(root: Path, kid: str, body: str) -> Path:
    d = root / "build" / "torch-cpu"
    d.mkdir(parents=True)
    (d / "__init__.py").write_text(body)
    (d / "metadata.json").write_text(
        json.dumps(
            {
                "name": "pure",
                "id": kid,
                "version": 1,
                "license": "MIT",
                "python-depends": [],
                "kernel-depends": [],
                "backend": {"type": "cpu"},
            }
        )
    )
    return d


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


# -- hole 2: metadata.json's id becomes a module name --------------------------------------------------------


def test_a_variant_named_json_does_not_replace_the_json_module(tmp_path, record) -> None:
    real_json = sys.modules["json"]
    _variant(tmp_path, "json", "dumps = lambda *a, **k: 'owned'\n")
    with pytest.raises(MetadataError, match="key 'id'"):
        hubkernels.get_local_kernel(tmp_path)
    assert sys.modules["json"] is real_json and json.dumps([1]) == "[1]"
    record(1)


@pytest.mark.parametrize("unique", ["rev123", "1a2b3c4", "1a2b3c4_dirty", "abcdefghijklm", "Build_7"])
def test_an_id_kernel_builder_accepts_loads(tmp_path, unique, record) -> None:
    kid = f"_pure_cpu_{unique}"
    _variant(tmp_path, kid, "VALUE = 7\n")
    record(1)
    assert hubkernels.get_local_kernel(tmp_path).VALUE == 7


@pytest.mark.parametrize(
    "kid", ["json", "_pure_cpu_", "_pure_cuda_1a2b3c4", "_pure_cpu_a.b", "_pure_cpu_a-b", "_other_cpu_1a2b3c4"]
)
def test_an_id_outside_the_builds_own_namespace_is_refused(tmp_path, kid, record) -> None:
    _variant(tmp_path, kid, "VALUE = 7\n")
    record(1)
    with pytest.raises(MetadataError, match="key 'id'"):
        hubkernels.get_local_kernel(tmp_path)


def test_a_failed_load_named_torch_leaves_torch_imported(tmp_path, record) -> None:
    import torch

    _variant(tmp_path, "torch", "raise RuntimeError('boom')\n")
    with pytest.raises(MetadataError):
        hubkernels.get_local_kernel(tmp_path)
    assert sys.modules["torch"] is torch
    # an id in the grammar that some other module already holds: refused, and the holder stays
    holder = type(sys)("_pure_cpu_abcdef0")
    sys.modules["_pure_cpu_abcdef0"] = holder
    try:
        _variant(tmp_path / "b", "_pure_cpu_abcdef0", "raise RuntimeError('boom')\n")
        with pytest.raises(KernelLoadError, match="already imported"):
            hubkernels.get_local_kernel(tmp_path / "b")
        assert sys.modules["_pure_cpu_abcdef0"] is holder
    finally:
        del sys.modules["_pure_cpu_abcdef0"]
    # a failing import removes only what it added
    _variant(tmp_path / "c", "_pure_cpu_abcdef1", "import json\nraise RuntimeError('boom')\n")
    with pytest.raises(KernelLoadError, match="boom"):
        hubkernels.get_local_kernel(tmp_path / "c")
    assert "_pure_cpu_abcdef1" not in sys.modules and sys.modules["json"] is json
    record(3)


def test_two_copies_of_one_build_under_different_ids_are_a_typed_error_not_an_abort(
    ltx_build, tmp_path, record
) -> None:
    src = ltx_build.path
    meta = Metadata.read(src)
    other = f"_ltx_kernels_cpu_{'0' * 7}"
    renamed_id = tmp_path / "a" / "build" / src.name
    shutil.copytree(src, renamed_id)
    data = json.loads((renamed_id / "metadata.json").read_text())
    data["id"] = other
    (renamed_id / "metadata.json").write_text(json.dumps(data))
    renamed_lib = tmp_path / "b" / "build" / src.name
    shutil.copytree(renamed_id, renamed_lib)
    (renamed_lib / f"{meta.id}.abi3.so").rename(renamed_lib / f"{other}.abi3.so")
    out = _python(f"""
        import hubkernels
        from hubkernels.errors import HubkernelsError
        hubkernels.get_local_kernel({str(src)!r})
        for path in ({str(renamed_id)!r}, {str(renamed_lib)!r}):
            try:
                hubkernels.get_local_kernel(path)
                print("LOADED")
            except HubkernelsError as e:
                print(type(e).__name__)
        """)
    assert out.returncode == 0, out.stderr[-2000:]  # b50b33f: the process aborts (torch namespace registered twice)
    assert out.stdout.split() == ["KernelLoadError", "KernelLoadError"], out.stdout
    record(2)


def _renamed_copy(src: Path, dest: Path, new_id: str) -> Path:
    """A copy of the variant at `src` whose metadata id, Python files and library file name say `new_id` (the
    library itself still registers `src`'s op namespace)."""
    meta = Metadata.read(src)
    shutil.copytree(src, dest)
    data = json.loads((dest / "metadata.json").read_text())
    data["id"] = new_id
    (dest / "metadata.json").write_text(json.dumps(data))
    for py in dest.glob("*.py"):
        py.write_text(py.read_text().replace(meta.id, new_id))
    (dest / f"{meta.id}.abi3.so").rename(dest / f"{new_id}.abi3.so")
    return dest / f"{new_id}.abi3.so"


def _same_length_id(kid: str) -> str:
    """Another id of the same length as `kid` (its 7-hex unique part changed)."""
    head, sep, tail = kid.rpartition("_cpu_")
    return head + sep + ("1111111" if tail[:7] == "0000000" else "0000000") + tail[7:]


def test_32_appended_bytes_naming_pyinit_do_not_pass_the_module_id_check(ltx_build, tmp_path, record) -> None:
    src = ltx_build.path
    other = _same_length_id(Metadata.read(src).id)
    lib = _renamed_copy(src, tmp_path / "k" / "build" / src.name, other)
    with open(lib, "ab") as f:
        f.write(f"PyInit_{other}\0".encode().ljust(32, b"\0"))  # what the old byte search looked for
    out = _python(f"""
        import hubkernels
        from hubkernels.errors import HubkernelsError
        hubkernels.get_local_kernel({str(src)!r})
        try:
            hubkernels.get_local_kernel({str(lib.parent)!r})
            print("LOADED")
        except HubkernelsError as e:
            print(type(e).__name__, "PyInit" in str(e))
        """)
    record(1, int(out.returncode != 0 or "LOADED" in out.stdout))
    assert out.returncode == 0, out.stderr[-2000:]  # 28dd25c: SIGSEGV, registering the namespace twice
    assert out.stdout.split() == ["KernelLoadError", "True"], out.stdout


def test_a_second_build_of_one_op_namespace_under_another_id_is_refused_before_dlopen(
    ltx_build, tmp_path, record
) -> None:
    src = ltx_build.path
    meta = Metadata.read(src)
    other = _same_length_id(meta.id)
    lib = _renamed_copy(src, tmp_path / "k" / "build" / src.name, other)
    data = lib.read_bytes()
    assert data.count(f"PyInit_{meta.id}".encode()) >= 1
    lib.write_bytes(data.replace(f"PyInit_{meta.id}".encode(), f"PyInit_{other}".encode()))  # a rebuilt module id
    out = _python(f"""
        import hubkernels
        from hubkernels.fetch import OpNamespaceError
        first = hubkernels.get_local_kernel({str(src)!r})
        try:
            hubkernels.get_local_kernel({str(lib.parent)!r})
            print("LOADED")
        except OpNamespaceError as e:
            print("OpNamespaceError", {meta.id!r} in str(e))
        print(first.__name__)
        """)
    record(1, int(out.returncode != 0 or "LOADED" in out.stdout))
    assert out.returncode == 0, out.stderr[-2000:]  # 28dd25c: SIGSEGV (both loaders)
    assert out.stdout.split() == ["OpNamespaceError", "True", meta.id], out.stdout


# -- hole 3: trust given by keys alone --------------------------------------------------------------------


@pytest.fixture(scope="module")
def untrusted(hub, tmp_path_factory) -> str:
    repo_id = new_repo("evilorg")
    upload(make_kernel(tmp_path_factory.mktemp("evil") / "k", value=666), repo_id=repo_id)
    return repo_id


@pytest.mark.parametrize("trust", [{"evilorg": False}, {"evilorg": True}, "evilorg", 1, [1]])
def test_trust_is_never_read_from_a_mappings_keys(untrusted, tmp_path, trust, record) -> None:
    with pytest.raises(UsageError, match="True, False, or a list"):
        get_kernel(untrusted, version=1, trust_remote_code=trust, cache_dir=tmp_path)
    assert not (tmp_path / f"kernels--evilorg--{untrusted.split('/')[1]}" / "snapshots").exists()
    record(1)


# -- hole 5: bytecode beside verified sources --------------------------------------------------------------


def test_a_poisoned_pyc_beside_a_verified_source_does_not_run(hub, tmp_path, record) -> None:
    repo_id = new_repo()
    upload(make_kernel(tmp_path / "k", value=1), repo_id=repo_id)
    cache = tmp_path / "cache"
    installed = install(repo_id, version=1, cache_dir=cache)
    init = installed.path / "__init__.py"
    st = init.stat()
    evil = compile("VALUE = 666\ndef double(x):\n    return x * 0\n", str(init), "exec")
    pyc = Path(importlib.util.cache_from_source(str(init)))
    pyc.parent.mkdir(exist_ok=True)
    # a valid timestamp pyc for the verified source's own mtime and size: Python would trust it
    pyc.write_bytes(
        importlib.util.MAGIC_NUMBER
        + (0).to_bytes(4, "little")
        + int(st.st_mtime).to_bytes(4, "little")
        + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
        + marshal.dumps(evil)
    )
    out = _python(
        f"import hubkernels.fetch as f; print(f.get_kernel({repo_id!r}, version=1).VALUE)", HF_HUB_CACHE=str(cache)
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "1"  # b50b33f: 666
    assert pyc.read_bytes()[16:] == marshal.dumps(evil)  # and nothing rewrote it: no bytecode is read or written
    record(1)


# -- hole 6: a hub whose ETag names a path outside the cache ------------------------------------------------


class _EvilHub(http.server.BaseHTTPRequestHandler):
    """Answers every file with a valid body and an ETag that is an absolute path (the upstream reproduction)."""

    target = ""

    def _head(self) -> None:
        self.send_response(200)
        self.send_header("X-Repo-Commit", "a" * 40)
        self.send_header("ETag", f'"{self.target}"')
        self.send_header("Content-Length", "5")
        self.end_headers()

    def do_HEAD(self) -> None:  # noqa: N802
        self._head()

    def do_GET(self) -> None:  # noqa: N802
        self._head()
        self.wfile.write(b"owned")

    def log_message(self, *args: object) -> None:
        pass


def test_upstream_hf_hub_download_writes_where_the_etag_says(tmp_path, record) -> None:
    """The upstream bug, reproduced with huggingface_hub alone: the ETag becomes a path outside cache_dir."""
    target = tmp_path / "outside" / "planted"
    target.parent.mkdir()
    _EvilHub.target = str(target)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EvilHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = _python(f"""
            from huggingface_hub import hf_hub_download
            try:
                hf_hub_download("a/b", "f.txt", cache_dir={str(tmp_path / "cache")!r},
                                endpoint="http://127.0.0.1:{server.server_address[1]}")
            except Exception as e:
                print(type(e).__name__, e)
            """)
    finally:
        server.shutdown()
    wrote_outside = target.exists()
    record(1, wrote_outside=wrote_outside)
    if not wrote_outside:
        pytest.skip(f"huggingface_hub no longer writes outside the cache ({out.stdout.strip()[:200]})")
    assert target.read_bytes() == b"owned"


def test_our_download_refuses_an_etag_that_is_not_the_files_hash(hub, tmp_path, record) -> None:
    repo_id = new_repo()
    upload(make_kernel(tmp_path / "k", value=1), repo_id=repo_id)
    without_artifacts(repo_id)  # per-file downloads, where the ETag names each file's blob
    commit = hubkernels.fetch.kernel_versions(repo_id)[1]
    outside = tmp_path / "outside"
    outside.mkdir()
    cases = {
        "absolute": str(outside / "planted"),
        "relative": "../../../../../../../../" + str(outside / "rel")[1:],
        "another file's hash": "b" * 40,
    }
    for label, etag in cases.items():
        hub.control.add_fault(
            r"/resolve/.*/build/torch-cpu/__init__\.py$",
            method="HEAD",
            status=200,
            headers={"ETag": f'"{etag}"', "X-Repo-Commit": commit},
            times=None,
        )
        try:
            with pytest.raises(DownloadError, match="not the file's hash"):
                get_kernel(repo_id, version=1, cache_dir=tmp_path / label)
        finally:
            hub.control.clear_faults()
        assert list(outside.iterdir()) == [], label  # b50b33f: the blob lands outside the cache
        state = RepoState(repo_id, tmp_path / label)
        assert not (state.variant_dir(commit, "torch-cpu") / "__init__.py").exists()
    assert get_kernel(repo_id, version=1, cache_dir=tmp_path / "absolute").VALUE == 1  # an honest answer loads
    record(len(cases))
