"""One rule says what a Hub repo id is (`layout.is_repo_id`, the Hub's own: letters, digits, '-', '_', '.', at most
96 characters a part, no '--' or '..', not ending in '.git'), and the loader, lock files, build.toml and model
configs all refuse the same names with it, before any request."""

from __future__ import annotations

from pathlib import Path

import pytest

import hubkernels
from hubkernels.config import ConfigError, load_config
from hubkernels.errors import UsageError
from hubkernels.fetch import LockFileError
from hubkernels.fetch.lockfile import read_dependencies
from hubkernels.integrations.config import ConfigEntryError, declare_hub_kernels
from hubkernels.layout import is_repo_id

GOOD = ["kernels-community/activation", "hubkernels/ltx-kernels", "Org_1/name.v2", "a/b"]
BAD = ["name", "org/", "/name", "a/b/c", "org/na--me", "org/na..me", "org/name.git", "-org/name", "org/name-", "o g/n"]


@pytest.mark.parametrize("repo_id", GOOD + BAD)
def test_the_rule(repo_id: str) -> None:
    assert is_repo_id(repo_id) is (repo_id in GOOD)


@pytest.mark.parametrize("repo_id", BAD)
def test_every_reader_refuses_what_the_hub_refuses(repo_id: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="must look like 'org/name'"):
        hubkernels.get_kernel(repo_id, version=1)  # refused before any request: no Hub runs in this test
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[tool.kernels.dependencies]\n"{repo_id}" = 1\n')
    with pytest.raises(LockFileError, match="org/name"):
        read_dependencies(pyproject)
    (tmp_path / "build.toml").write_text(
        '[general]\nname = "my-kernel"\nversion = 1\nedition = 5\nlicense = "Apache-2.0"\nbackends = ["cpu"]\n'
        f'[general.hub]\nrepo-id = "{repo_id}"\n[torch-noarch]\n'
    )
    with pytest.raises(ConfigError, match="owner/name"):
        load_config(tmp_path)
    with pytest.raises(ConfigEntryError, match="org/name"):
        declare_hub_kernels(object(), {"RMSNorm": {"repo_id": repo_id, "layer": "L", "version": 1}})
