"""The edition-5 schema: turns a parsed `build.toml` document into a `BuildConfig`, failing on the first
violation (every table rejects unknown keys, as kernel-builder's `deny_unknown_fields` does)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..layout import is_repo_id
from .model import (
    _FRAMEWORKS,
    _GENERAL_KEYS,
    _GIT_SCHEMES,
    _KERNEL_BACKEND_KEYS,
    _KERNEL_COMMON_KEYS,
    _NAME_RE,
    _TOP_KEYS,
    BACKENDS,
    DEPENDENCIES,
    EDITION,
    KERNEL_BACKENDS,
    LEGACY_EDITION,
    PYTHON_DEPENDS,
    BuildConfig,
    ConfigError,
    General,
    GeneralBackend,
    GeneralCuda,
    HubConfig,
    KernelConfig,
    KernelDependency,
    StableAbi,
    TorchConfig,
    TorchNoarch,
    TvmFfi,
)
from .tables import _cuda_capabilities, _did_you_mean, _kernel_dependency, _rocm_archs, _Table, _toml_type, _toml_value

_NEEDS_V5 = f" It needs edition {EDITION}: add edition = {EDITION} to [general]."
_GENERAL_KEYS_V4 = tuple(k for k in _GENERAL_KEYS if k not in ("edition", "kernel-depends", "tpu"))


class _Reader:
    """Turns the parsed TOML document into a BuildConfig, failing on the first schema violation."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.legacy = False  # edition 4: upgraded to 5 in memory

    def build(self, data: dict[str, Any], root: Path, resolved_file: Path) -> BuildConfig:
        top = _Table(self.file, "", data)
        top.check_keys(
            _TOP_KEYS,
            {"test": " build.toml has no [test] table: tests are found in tests/ by convention."},
        )
        if "general" not in data:
            raise ConfigError(
                self.file,
                "general",
                None,
                "is missing; add [general] with name, version, edition = 5, license and backends",
            )
        general_table = top.sub("general")
        assert general_table is not None
        general = self.general(general_table)

        present = [name for name in _FRAMEWORKS if name in data]
        if not present:
            raise ConfigError(
                self.file,
                "",
                None,
                "has no framework table; add exactly one of [torch] (compiled extension), "
                "[torch-noarch] (pure Python) or [tvm-ffi]",
            )
        if len(present) > 1:
            raise ConfigError(
                self.file,
                present[1],
                None,
                f"cannot be combined with [{present[0]}]; a kernel has exactly one framework table, keep one",
            )
        framework = top.sub(present[0])
        assert framework is not None
        if self.legacy and present[0] == "torch" and isinstance(data["torch"].get("stable-abi"), dict):
            framework.fail("stable-abi", "must be a version string in edition 4 (no edition key)." + _NEEDS_V5)
        torch = self.torch(framework) if present[0] == "torch" else None
        noarch = self.torch_noarch(framework) if present[0] == "torch-noarch" else None
        tvm_ffi = self.tvm_ffi(framework) if present[0] == "tvm-ffi" else None

        kernels: dict[str, KernelConfig] = {}
        kernel_table = top.sub("kernel")
        if kernel_table is not None:
            for name, value in kernel_table.data.items():
                if not isinstance(value, dict):
                    kernel_table.fail(
                        name,
                        f"must be a table [kernel.{name}], not {_toml_type(value)}; "
                        "each kernel is its own table, e.g. [kernel.my_kernel_cuda] with backend, depends and src",
                    )
                kernels[name] = self.kernel(_Table(self.file, f"kernel.{name}", value), name)

        return BuildConfig(
            root=root,
            file=resolved_file,
            general=general,
            torch=torch,
            torch_noarch=noarch,
            tvm_ffi=tvm_ffi,
            kernels=kernels,
        )

    # [general] ------------------------------------------------------------------------------------

    def general(self, t: _Table) -> General:
        # The edition decides the schema, so it is checked before anything else (as kernel-builder does). No
        # `edition` is edition 4, which kernels-data upgrades to 5 in memory: the same tables less kernel-depends,
        # [general.tpu] and a per-backend stable-abi table.
        if "edition" in t.data:
            edition = t.typed("edition", int, "an integer", f"edition = {EDITION}")
            if edition != EDITION:
                t.fail(
                    "edition",
                    f"is {edition}: unsupported build edition {edition}; hubkernels reads edition "
                    f"{EDITION} and edition 4 (no edition key): set edition = {EDITION}",
                )
            t.check_keys(_GENERAL_KEYS)
        else:
            edition = LEGACY_EDITION
            t.check_keys(_GENERAL_KEYS_V4, {key: _NEEDS_V5 for key in _GENERAL_KEYS if key not in _GENERAL_KEYS_V4})
            for sub in ("cuda", "xpu", "neuron"):
                if isinstance(t.data.get(sub), dict) and "kernel-depends" in t.data[sub]:
                    t.sub(sub).fail("kernel-depends", "is not allowed here." + _NEEDS_V5)  # type: ignore[union-attr]
            self.legacy = True
        for key, example in (
            ("name", 'name = "my-kernel"'),
            ("version", "version = 1"),
            ("license", 'license = "apache-2.0"'),
            ("backends", 'backends = ["cpu", "cuda"]'),
        ):
            t.require(key, example)

        name = t.typed("name", str, "a string", 'name = "my-kernel"')
        if not _NAME_RE.match(name):
            suggestion = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
            hint = f" (e.g. {suggestion!r})" if _NAME_RE.match(suggestion) else " (e.g. 'my-kernel')"
            t.fail(
                "name",
                f"has {name!r}, which is not a valid kernel name: use lowercase letters, digits and '-', "
                f"starting with a letter and ending with a letter or digit{hint}",
            )
        version = t.typed("version", int, "an integer", "version = 1")
        if version < 0:
            t.fail("version", f"is {version}; the major version must be 0 or more (e.g. version = 1)")
        license_ = t.string("license", 'license = "apache-2.0"', required=True)
        assert license_ is not None

        backends = t.choices("backends", BACKENDS, "a backend", 'backends = ["cpu", "cuda"]', required=True)
        if not backends:
            t.fail("backends", f"is empty; list the backends this kernel supports (any of {', '.join(BACKENDS)})")
        backends = tuple(dict.fromkeys(backends))

        upstream = self.git_url(t, "upstream")
        source = self.git_url(t, "source")
        python_depends = self.python_depends(t, "general")
        kernel_depends = self.kernel_depends(t)

        hub = HubConfig()
        hub_table = t.sub("hub")
        if hub_table is not None:
            hub_table.check_keys(("repo-id", "branch"))
            repo_id = hub_table.string("repo-id", 'repo-id = "my-org/my-kernel"')
            if repo_id is not None and not is_repo_id(repo_id):
                hub_table.fail("repo-id", f"has {repo_id!r}; write the Hub repository as 'owner/name'")
            hub = HubConfig(repo_id=repo_id, branch=hub_table.string("branch", 'branch = "v1"'))

        cuda = GeneralCuda()
        cuda_table = t.sub("cuda")
        if cuda_table is not None:
            cuda_table.check_keys(("minver", "maxver", "kernel-depends", "python-depends"))
            minver = cuda_table.version("minver", 'minver = "12.8"')
            maxver = cuda_table.version("maxver", 'maxver = "13.0"')
            self.check_bounds(cuda_table, minver, maxver)
            cuda = GeneralCuda(
                minver=minver,
                maxver=maxver,
                python_depends=self.python_depends(cuda_table, "cuda"),
                kernel_depends=self.kernel_depends(cuda_table),
            )

        per_backend: dict[str, GeneralBackend] = {}
        for backend in ("xpu", "neuron", "tpu"):
            table = t.sub(backend)
            if table is None:
                per_backend[backend] = GeneralBackend()
                continue
            table.check_keys(("python-depends",) if backend == "tpu" else ("kernel-depends", "python-depends"))
            per_backend[backend] = GeneralBackend(
                python_depends=self.python_depends(table, backend),
                kernel_depends=self.kernel_depends(table),
            )

        return General(
            name=name,
            version=version,
            edition=edition,
            license=license_,
            backends=backends,
            upstream=upstream,
            source=source,
            python_depends=python_depends,
            kernel_depends=kernel_depends,
            hub=hub,
            cuda=cuda,
            xpu=per_backend["xpu"],
            neuron=per_backend["neuron"],
            tpu=per_backend["tpu"],
        )

    @staticmethod
    def python_depends(t: _Table, scope: str) -> tuple[str, ...]:
        """`python-depends` of [general] (scope "general") or [general.<backend>]: curated names only."""
        allowed = PYTHON_DEPENDS[scope]
        hints = {
            dep: f" '{dep}' belongs in [{'general' if owner == 'general' else 'general.' + owner}] python-depends."
            for owner, deps in PYTHON_DEPENDS.items()
            if owner != scope
            for dep in deps
        }
        what = "a curated Python dependency" + ("" if scope == "general" else f" for {scope}")
        example = f"python-depends = [{_toml_value(allowed[0])}]" if allowed else "python-depends = []"
        return t.choices("python-depends", allowed, what, example, hints=hints)

    @staticmethod
    def git_url(t: _Table, key: str) -> str | None:
        value = t.string(key, f'{key} = "https://github.com/org/repo.git"')
        if value is None:
            return None
        scheme, sep, rest = value.partition("://")
        if sep:
            if scheme not in _GIT_SCHEMES or not rest.strip("/"):
                schemes = ", ".join(_GIT_SCHEMES)
                t.fail(key, f"has {value!r}, which is not a git URL; use one of the schemes {schemes}")
            return value
        host, colon, path = value.partition(":")  # scp-like: git@github.com:org/repo.git
        if colon and host and path and not path.startswith("/") and " " not in value:
            return value
        t.fail(key, f'has {value!r}, which is not a git URL (e.g. "https://github.com/org/repo.git")')

    @staticmethod
    def kernel_depends(t: _Table) -> tuple[KernelDependency, ...]:
        """`kernel-depends`: inline tables `{ repo-id = "o/n", version = 1 }` or `{ ..., revision = "sha" }`."""
        key = "kernel-depends"
        if key not in t.data:
            return ()
        example = '[{ repo-id = "kernels-community/activation", version = 1 }]'
        entries = t.typed(key, list, "an array of tables", f"{key} = {example}")
        deps: list[KernelDependency] = []
        for index, entry in enumerate(entries, start=1):
            if not isinstance(entry, dict):
                t.fail(key, f"entry {index} must be a table, not {_toml_type(entry)} (e.g. {key} = {example})")
            deps.append(_kernel_dependency(t, f"entry {index}", entry))
        return tuple(deps)

    @staticmethod
    def check_bounds(t: _Table, minver: str | None, maxver: str | None) -> None:
        if minver is None or maxver is None:
            return
        low = tuple(int(p) for p in minver.split("."))
        high = tuple(int(p) for p in maxver.split("."))
        if low > high:
            t.fail("maxver", f"is {maxver!r}, below minver {minver!r}; no version would be built")

    # framework tables ----------------------------------------------------------------------------

    def torch(self, t: _Table) -> TorchConfig:
        t.check_keys(("src", "include", "pyext", "minver", "maxver", "cxx-flags", "stable-abi"))
        minver = t.version("minver", 'minver = "2.12"')
        maxver = t.version("maxver", 'maxver = "2.13"')
        self.check_bounds(t, minver, maxver)
        return TorchConfig(
            src=t.relative_paths("src", 'src = ["torch-ext/torch_binding.cpp"]'),
            include=t.relative_paths("include", 'include = ["csrc/include"]'),
            pyext=t.pyext(),
            minver=minver,
            maxver=maxver,
            cxx_flags=t.strings("cxx-flags", 'cxx-flags = ["-O3"]'),
            stable_abi=self.stable_abi(t),
        )

    @staticmethod
    def stable_abi(t: _Table) -> StableAbi | None:
        if "stable-abi" not in t.data:
            return None
        value = t.data["stable-abi"]
        if isinstance(value, str):
            version = t.version("stable-abi", 'stable-abi = "2.11"')
            assert version is not None
            return version
        if not isinstance(value, dict):
            t.fail(
                "stable-abi",
                f"must be a version string or a table of backend = version, not {_toml_type(value)} "
                '(e.g. stable-abi = "2.11" or stable-abi = { cuda = "2.11" })',
            )
        table = _Table(t.file, "torch.stable-abi", value)
        table.check_keys(BACKENDS)
        versions: dict[str, str] = {}
        for backend in value:
            version = table.version(backend, f'{backend} = "2.11"')
            assert version is not None
            versions[backend] = version
        return versions

    @staticmethod
    def torch_noarch(t: _Table) -> TorchNoarch:
        # kernel-builder's TorchNoarch lacks the kebab-case rename, so the code reads the snake_case
        # spellings while the docs show kebab-case; both are accepted here.
        t.check_keys(("pyext", "cuda-capabilities", "rocm-archs", "cuda_capabilities", "rocm_archs"))
        for kebab, snake in (("cuda-capabilities", "cuda_capabilities"), ("rocm-archs", "rocm_archs")):
            if kebab in t.data and snake in t.data:
                t.fail(snake, f"repeats '{kebab}' (two spellings of one key); keep one")
        cap_key = "cuda_capabilities" if "cuda_capabilities" in t.data else "cuda-capabilities"
        arch_key = "rocm_archs" if "rocm_archs" in t.data else "rocm-archs"
        return TorchNoarch(
            pyext=t.pyext(),
            cuda_capabilities=_cuda_capabilities(t, cap_key),
            rocm_archs=_rocm_archs(t, arch_key),
        )

    @staticmethod
    def tvm_ffi(t: _Table) -> TvmFfi:
        t.check_keys(("src", "include", "pyext", "cxx-flags"))
        return TvmFfi(
            src=t.relative_paths("src", 'src = ["tvm-ffi-ext/tvm_ffi_binding.cpp"]', required=True),
            include=t.relative_paths("include", 'include = ["csrc/include"]'),
            pyext=t.pyext(),
            cxx_flags=t.strings("cxx-flags", 'cxx-flags = ["-O3"]'),
        )

    # [kernel.<name>] -----------------------------------------------------------------------------

    @staticmethod
    def kernel(t: _Table, name: str) -> KernelConfig:
        """One [kernel.<name>]: `backend` first, because it decides which other keys are allowed."""
        t.require("backend", 'backend = "cuda"')
        backend = t.typed("backend", str, "a string", 'backend = "cuda"')
        if backend not in KERNEL_BACKENDS:
            if backend in BACKENDS:
                extra = f" {backend} is built noarch: remove this table and keep {backend!r} in [general] backends."
            else:
                extra = _did_you_mean(backend, KERNEL_BACKENDS)
            names = ", ".join(KERNEL_BACKENDS)
            t.fail("backend", f"has {backend!r}, which cannot build native kernels (allowed: {names}).{extra}")
        allowed = _KERNEL_COMMON_KEYS + _KERNEL_BACKEND_KEYS[backend]
        hints = {
            key: f" '{key}' applies to backend '{owner}' only; this kernel's backend is '{backend}'."
            for owner, keys in _KERNEL_BACKEND_KEYS.items()
            if owner != backend
            for key in keys
        }
        t.check_keys(allowed, hints)
        t.require("depends", 'depends = ["torch"]')
        suffix = {"cuda": "cu", "rocm": "cu", "metal": "mm"}.get(backend, "cpp")
        src = t.relative_paths("src", f'src = ["{name}/{name}.{suffix}"]', required=True)
        if not src:
            t.fail("src", "is empty; list the kernel's source files, relative to the kernel root")
        return KernelConfig(
            name=name,
            backend=backend,
            depends=t.choices("depends", DEPENDENCIES, "a known dependency", 'depends = ["torch"]', required=True),
            src=src,
            include=t.relative_paths("include", f'include = ["{name}"]'),
            cxx_flags=t.strings("cxx-flags", 'cxx-flags = ["-O3"]'),
            cuda_capabilities=_cuda_capabilities(t, "cuda-capabilities"),
            cuda_flags=t.strings("cuda-flags", 'cuda-flags = ["--use_fast_math"]'),
            cuda_minver=t.version("cuda-minver", 'cuda-minver = "12.8"'),
            rocm_archs=_rocm_archs(t, "rocm-archs"),
            hip_flags=t.strings("hip-flags", 'hip-flags = ["-O3"]'),
            sycl_flags=t.strings("sycl-flags", 'sycl-flags = ["-O3"]'),
        )
