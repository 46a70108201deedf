"""Loading fails forward: a published variant whose native module does not load on this machine.

A repo published by someone else's builder can hold a variant that passes every digest yet does not load here (a
symbol this torch lacks). The loader says which variant, which symbol and what to do, in one line; it takes the
next variant that fits; with `build=True` it builds the published source; nothing of the failed import stays.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_kernel, new_repo

from hubkernels.digest import hash_variant
from hubkernels.errors import VariantImportError
from hubkernels.fetch import get_kernel
from hubkernels.publish import upload

BROKEN = "torch-stable-abi210-cpu-x86_64-linux"  # preferred over the noarch torch-cpu on every CPU machine
MISSING = "hubkernels_probe_symbol_no_torch_exports"
BROKEN_ID = "_tiny_act_cpu_0badc0d"


def _broken_variant(good: Path, dest: Path) -> Path:
    """tiny-act's noarch files plus a native module that calls a symbol no library exports, digest made anew."""
    meta = json.loads((good / "metadata.json").read_text())
    uid = BROKEN_ID
    dest.mkdir(parents=True)
    for f in good.iterdir():
        if f.name != "metadata.json" and f.is_file():
            (dest / f.name).write_bytes(f.read_bytes())
    (dest / "_ops.py").write_text(f"from . import {uid}  # noqa: F401\n")
    init = dest / "__init__.py"
    init.write_text("from . import _ops  # noqa: F401\n" + init.read_text())
    src = dest.parent / "broken.c"
    src.write_text(
        f"#include <Python.h>\nint {MISSING}(void);\nstatic struct PyModuleDef m = "
        f'{{PyModuleDef_HEAD_INIT, "{uid}", 0, -1, 0}};\n'
        f"PyMODINIT_FUNC PyInit_{uid}(void) {{ {MISSING}(); return PyModule_Create(&m); }}\n"
    )
    include = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{include}", "-o", str(dest / f"{uid}.abi3.so"), str(src)], check=True)
    src.unlink()
    meta.update(id=uid, backend={"type": "cpu"})
    meta["digest"] = {"algorithm": "sha256", "files": {}}
    (dest / "metadata.json").write_text(json.dumps(meta))
    meta["digest"]["files"] = {k: v for k, v in hash_variant(dest).items() if k != "metadata.json"}
    (dest / "metadata.json").write_text(json.dumps(meta, indent=2))
    return dest


def _publish(tmp: Path, *, with_noarch: bool) -> str:
    """tiny-act v1 with the broken variant beside (or instead of) its CPU noarch one, laid out as kernel-builder
    publishes (build/ and source/, no wheels/)."""
    from huggingface_hub import HfApi

    kernel = make_kernel(tmp / "kernel", backends=("cpu", "cuda"))
    repo_id = new_repo()
    broken = _broken_variant(kernel / "build" / "torch-cpu", tmp / "extra" / BROKEN)
    if not with_noarch:
        for f in (kernel / "build" / "torch-cpu").iterdir():
            f.unlink()
        (kernel / "build" / "torch-cpu").rmdir()
    upload(kernel, repo_id=repo_id)
    api = HfApi()
    api.delete_folder("wheels", repo_id=repo_id, revision="v1", repo_type="kernel")  # kernel-builder ships no wheels
    api.upload_folder(
        repo_id=repo_id, folder_path=str(broken), path_in_repo=f"build/{BROKEN}", revision="v1", repo_type="kernel"
    )
    return repo_id


def test_a_variant_that_does_not_load_names_its_symbol_and_the_next_variant_loads(hub, tmp_path, caplog):
    repo_id = _publish(tmp_path, with_noarch=True)
    with caplog.at_level(logging.WARNING, logger="hubkernels.fetch"):
        mod = get_kernel(repo_id, version=1, cache_dir=tmp_path / "cache")
    assert mod.VALUE == 1 and not hasattr(mod, "_ops")  # the noarch variant, not the broken one
    warned = [r.getMessage() for r in caplog.records if BROKEN in r.getMessage()]
    assert len(warned) == 1 and MISSING in warned[0] and "trying the next variant" in warned[0], warned
    assert not [name for name in sys.modules if BROKEN_ID in name]  # nothing of the failed import stays


def test_with_no_other_variant_the_error_says_what_to_do_and_build_true_builds_the_source(hub, tmp_path):
    repo_id = _publish(tmp_path, with_noarch=False)
    with pytest.raises(VariantImportError) as failed:
        get_kernel(repo_id, version=1, backend="cpu", cache_dir=tmp_path / "cache")
    message = str(failed.value)
    assert "\n" not in message and BROKEN in message and MISSING in message and "build=True" in message
    assert failed.value.variant == BROKEN
    mod = get_kernel(repo_id, version=1, backend="cpu", cache_dir=tmp_path / "cache", build=True)
    assert mod.VALUE == 1 and Path(mod.__file__).parent.name == "torch-cpu"
