"""Files are put in place whole: `layout.write_atomic`, which the cache records, lock files and the server's
token and Xet records are written with."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from hubkernels.layout import write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_write_that_fails_keeps_the_old_file_and_leaves_nothing_behind(tmp_path: Path) -> None:
    lock = tmp_path / "kernels.lock"
    write_atomic(lock, "[]\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(lock, "\ud800")  # fails while the new content is being written
    assert lock.read_text() == "[]\n"
    assert [p.name for p in tmp_path.iterdir()] == ["kernels.lock"]


def test_a_rewrite_keeps_the_permissions_a_user_gave_the_file(tmp_path: Path) -> None:
    new, kept, private = tmp_path / "new.json", tmp_path / "kept.lock", tmp_path / "tokens.json"
    write_atomic(new, b"{}")
    write_atomic(kept, "[]")
    kept.chmod(0o640)
    write_atomic(kept, "[1]")
    write_atomic(private, "{}", mode=0o600, durable=True)
    assert (_mode(new), _mode(kept), _mode(private)) == (0o644, 0o640, 0o600)
    assert kept.read_text() == "[1]"


def test_the_temporary_file_can_live_in_another_directory(tmp_path: Path) -> None:
    staging, target = tmp_path / "tmp", tmp_path / "store" / "files" / "abc"
    staging.mkdir()
    write_atomic(target, b"xorb", tmp_dir=staging)
    assert target.read_bytes() == b"xorb" and list(staging.iterdir()) == []
