"""`metadata.json` of a build variant: validated against a schema with types and limits, read and written in
kernel-builder's key order.

A metadata.json comes from whoever published the variant, so every key is checked before any of it is used:
a wrong type, a value out of range, a too-deep or too-large document, or an `id` that is not the variant's
unique op namespace is a `MetadataError` naming the file and the key.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import MetadataError

_ORDER = (
    "name",
    "id",
    "version",
    "license",
    "upstream",
    "source",
    "python-depends",
    "kernel-depends",
    "backend",
    "digest",
    "provenance",
)
_KNOWN = frozenset(_ORDER)

#: Limits: a real metadata.json is about 1 KiB, nests 3 deep and lists tens of files.
MAX_BYTES = 1 << 20
MAX_DEPTH = 16
MAX_ITEMS = 4096
MAX_STR = 4096
BACKENDS = ("cann", "cpu", "cuda", "metal", "neuron", "rocm", "tpu", "xpu")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
# kernel-builder's unique id: 7 hex of the git tree (+ `_dirty`), a random u64 in lowercase base32, or whatever
# `--unique-id` was given (e.g. `rev123`); it becomes part of a C and Python identifier, so identifier characters.
_UNIQUE = r"[A-Za-z0-9_]{1,64}"
_CUDA_ARCH = re.compile(r"\d{1,2}\.\d{1,2}[af]?(?:\+PTX)?")
_ARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,31}")
_B64 = re.compile(r"[A-Za-z0-9+/]{1,200}={0,2}")


def id_pattern(python_name: str, backend: str) -> re.Pattern[str]:
    """The ids kernel-builder gives a build of this kernel for `backend`: `_<python_name>_<backend>_<unique id>`."""
    return re.compile(f"_{re.escape(python_name)}_{re.escape(backend)}_{_UNIQUE}")


@dataclass
class Metadata:
    """The parsed metadata of one variant. Unknown keys are kept and written back unchanged."""

    name: str
    id: str
    version: int
    license: str
    backend: dict[str, Any]
    python_depends: list[str] = field(default_factory=list)
    kernel_depends: list[Any] = field(default_factory=list)
    upstream: str | None = None
    source: str | None = None
    digest: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")

    @property
    def backend_type(self) -> str:
        return str(self.backend.get("type", "cpu"))

    @property
    def archs(self) -> list[str]:
        return list(self.backend.get("archs") or [])

    @property
    def dirty(self) -> bool:
        """True if it was built from a git tree with uncommitted changes."""
        kernel = (self.provenance or {}).get("kernel")
        return bool(kernel.get("dirty")) if isinstance(kernel, dict) else False

    @classmethod
    def from_dict(cls, d: Any, source: str = "metadata.json") -> Metadata:
        """Validate and parse a decoded metadata.json; `source` names it in errors."""
        return _Checker(source).metadata(d)

    @classmethod
    def parse(cls, raw: bytes, source: str = "metadata.json") -> Metadata:
        """Decode and validate the bytes of a metadata.json (at most MAX_BYTES, UTF-8 JSON)."""
        check = _Checker(source)
        if len(raw) > MAX_BYTES:
            raise check.error("", f"is {len(raw)} bytes, over the {MAX_BYTES}-byte limit")
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except UnicodeDecodeError as e:
            raise check.error("", f"is not UTF-8 ({e.reason} at byte {e.start})") from None
        except RecursionError:
            raise check.error("", f"nests deeper than {MAX_DEPTH} levels") from None
        except ValueError as e:
            raise check.error("", f"is not valid JSON ({str(e).splitlines()[0]})") from None
        return check.metadata(data)

    @classmethod
    def read(cls, path: str | Path) -> Metadata:
        """Read `path` (a metadata.json or the variant directory holding it)."""
        p = Path(path)
        if p.is_dir():
            p = p / "metadata.json"
        try:
            with open(p, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
        except FileNotFoundError:
            raise FileNotFoundError(f"{p} does not exist: not a build variant directory") from None
        except OSError as e:
            raise MetadataError(f"{p} cannot be read ({e.strerror or e}).") from None
        return cls.parse(raw, str(p))

    def to_dict(self) -> dict[str, Any]:
        values = {
            "name": self.name,
            "id": self.id,
            "version": self.version,
            "license": self.license,
            "upstream": self.upstream,
            "source": self.source,
            "python-depends": self.python_depends,
            "kernel-depends": self.kernel_depends,
            "backend": self.backend,
            "digest": self.digest,
            "provenance": self.provenance,
        }
        out = {k: values[k] for k in _ORDER if values[k] is not None or k == "kernel-depends"}
        out.update(self.extra)
        return out

    def write(self, variant_dir: str | Path) -> Path:
        path = Path(variant_dir) / "metadata.json"
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _depth(value: Any, limit: int) -> bool:
    """True if `value` nests at most `limit` containers deep (iterative: no recursion on hostile input)."""
    stack = [(value, 1)]
    seen = 0
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > limit:
                return False
            seen += len(v)
            if seen > 16 * MAX_ITEMS:
                return False
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return True


class _Checker:
    """Checks one metadata.json; every failure is a one-line MetadataError naming the file and the key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, key: str, problem: str) -> MetadataError:
        where = f"{self.source}: key {key!r}" if key else self.source
        return MetadataError(
            f"{where} {problem}. The variant's metadata is damaged or not from a kernel builder: "
            "rebuild it, or download it again."
        )

    def metadata(self, d: Any) -> Metadata:
        if not isinstance(d, dict):
            raise self.error("", f"must be a JSON object, not {_kind(d)}")
        if not _depth(d, MAX_DEPTH):
            raise self.error("", f"nests deeper than {MAX_DEPTH} levels or holds too many items")
        missing = [k for k in ("name", "id", "version") if k not in d]
        if missing:
            raise self.error(missing[0], "is missing (required: name, id, version)")
        name = self.string(d, "name", pattern=_NAME)
        backend = self.backend(d.get("backend", {"type": "cpu"}))
        python_name = name.replace("-", "_")
        kid = self.string(d, "id", limit=256)
        kind = backend.get("type", "cpu")
        if not id_pattern(python_name, kind).fullmatch(kid):
            raise self.error(
                "id",
                f"is {kid[:80]!r}, not this build's op namespace _{python_name}_{kind}_<7 hex "
                "or base32 id> (kernel-builder's grammar)",
            )
        version = d["version"]
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 2**31:
            raise self.error("version", f"must be a whole number from 0 to 2**31-1, not {_kind(version)}")
        return Metadata(
            name=name,
            id=kid,
            version=version,
            license=self.string(d, "license", default=""),
            backend=backend,
            python_depends=self.strings(d, "python-depends", _NAME),
            kernel_depends=self.kernel_depends(d.get("kernel-depends", [])),
            upstream=self.string(d, "upstream", default=None),
            source=self.string(d, "source", default=None),
            digest=self.digest(d.get("digest")),
            provenance=self.mapping(d, "provenance"),
            extra={k: v for k, v in d.items() if k not in _KNOWN},
        )

    def string(
        self, d: dict, key: str, *, pattern: re.Pattern[str] | None = None, limit: int = MAX_STR, default: Any = ...
    ) -> Any:
        if key not in d or (d[key] is None and default is None):
            if default is ...:
                raise self.error(key, "is missing")
            return default
        value = d[key]
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, not {_kind(value)}")
        if len(value) > limit:
            raise self.error(key, f"is {len(value)} characters long, over the limit of {limit}")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.error(key, f"is {value[:80]!r}, which is not a valid name")
        return value

    def strings(self, d: dict, key: str, pattern: re.Pattern[str]) -> list[str]:
        value = d.get(key, [])
        if value is None:
            return []
        if not isinstance(value, list) or len(value) > 256:
            raise self.error(key, f"must be a list of at most 256 names, not {_kind(value)}")
        for item in value:
            if not isinstance(item, str) or not pattern.fullmatch(item):
                raise self.error(key, f"holds {_kind(item)}, which is not a valid name")
        return list(value)

    def backend(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error("backend", f'must be an object like {{"type": "cpu"}}, not {_kind(value)}')
        kind = value.get("type", "cpu")
        if kind not in BACKENDS:
            raise self.error("backend.type", f"is {_short(kind)}, not one of {', '.join(BACKENDS)}")
        archs = value.get("archs")
        if archs is not None:
            pattern = _CUDA_ARCH if kind == "cuda" else _ARCH
            if not isinstance(archs, list) or len(archs) > 256:
                raise self.error("backend.archs", f"must be a list of architectures, not {_kind(archs)}")
            for arch in archs:
                if not isinstance(arch, str) or not pattern.fullmatch(arch):
                    raise self.error("backend.archs", f"holds {_short(arch)}, which is not a {kind} architecture")
        return dict(value)

    def kernel_depends(self, value: Any) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list) or len(value) > 256:
            raise self.error("kernel-depends", f"must be a list, not {_kind(value)}")
        for item in value:
            if isinstance(item, str) and len(item) <= 512:
                continue
            if not isinstance(item, dict) or not all(
                isinstance(k, str) and isinstance(v, (str, int)) and not isinstance(v, bool) for k, v in item.items()
            ):
                raise self.error(
                    "kernel-depends",
                    f'holds {_kind(item)}; each entry is an object such as {{"repo-id": "org/name", "version": 1}}',
                )
        return list(value)

    def digest(self, value: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error("digest", f"must be an object, not {_kind(value)}")
        if value.get("algorithm", "sha256") not in ("sha256", "sha512"):
            raise self.error("digest.algorithm", f"is {_short(value.get('algorithm'))}, not sha256 or sha512")
        files = value.get("files")
        if not isinstance(files, dict) or len(files) > MAX_ITEMS:
            raise self.error("digest.files", f"must be an object of at most {MAX_ITEMS} files, not {_kind(files)}")
        for rel, b64 in files.items():
            parts = rel.split("/")
            if (
                not rel
                or len(rel) > 1024
                or rel.startswith("/")
                or any(p in ("", ".", "..") for p in parts)
                or "\\" in rel
                or "\0" in rel
            ):
                raise self.error("digest.files", f"names {rel[:80]!r}, which is not a relative path in the variant")
            if not isinstance(b64, str) or not _B64.fullmatch(b64):
                raise self.error(f"digest.files.{rel[:80]}", f"is {_short(b64)}, not a base64 hash")
        return dict(value)

    def mapping(self, d: dict, key: str) -> dict[str, Any] | None:
        value = d.get(key)
        if value is not None and not isinstance(value, dict):
            raise self.error(key, f"must be an object, not {_kind(value)}")
        return value


def _kind(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "a non-finite number"
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    if isinstance(value, str):
        return repr(value[:80])
    return _kind(value)
