"""`metadata.json` of a build variant, read and written in kernel-builder's key order."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ORDER = ("name", "id", "version", "license", "upstream", "source", "python-depends", "kernel-depends",
          "backend", "digest", "provenance")


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
        return bool(((self.provenance or {}).get("kernel") or {}).get("dirty"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Metadata":
        missing = [k for k in ("name", "id", "version") if k not in d]
        if missing:
            raise ValueError(f"metadata.json lacks required key(s): {', '.join(missing)}")
        known = {"name", "id", "version", "license", "upstream", "source", "python-depends", "kernel-depends",
                 "backend", "digest", "provenance"}
        return cls(name=d["name"], id=d["id"], version=int(d["version"]), license=d.get("license", ""),
                   backend=dict(d.get("backend") or {"type": "cpu"}), python_depends=list(d.get("python-depends", [])),
                   kernel_depends=list(d.get("kernel-depends", [])), upstream=d.get("upstream"), source=d.get("source"),
                   digest=d.get("digest"), provenance=d.get("provenance"),
                   extra={k: v for k, v in d.items() if k not in known})

    @classmethod
    def read(cls, path: str | Path) -> "Metadata":
        """Read `path` (a metadata.json or the variant directory holding it)."""
        p = Path(path)
        if p.is_dir():
            p = p / "metadata.json"
        try:
            return cls.from_dict(json.loads(p.read_text()))
        except FileNotFoundError:
            raise FileNotFoundError(f"{p} does not exist: not a build variant directory") from None
        except (json.JSONDecodeError, ValueError) as e:
            raise ValueError(f"{p} is not valid metadata: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        values = {"name": self.name, "id": self.id, "version": self.version, "license": self.license,
                  "upstream": self.upstream, "source": self.source, "python-depends": self.python_depends,
                  "kernel-depends": self.kernel_depends, "backend": self.backend, "digest": self.digest,
                  "provenance": self.provenance}
        out = {k: values[k] for k in _ORDER if values[k] is not None or k == "kernel-depends"}
        out.update(self.extra)
        return out

    def write(self, variant_dir: str | Path) -> Path:
        path = Path(variant_dir) / "metadata.json"
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path
