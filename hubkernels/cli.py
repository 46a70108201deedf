"""`hubkernels` command line: a thin shell over the library. Usage and config errors exit 2 with one line."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from .errors import HubkernelsError

#: Modules that add their own subcommands through `register_cli(subparsers)`.
_PLUGGABLE = ("hubkernels.server", "hubkernels.publish", "hubkernels.fetch", "hubkernels.bench", "hubkernels.demo",
              "hubkernels.skill_cli",
              "hubkernels.scaffold", "hubkernels.verify")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line on stderr, exit 2, like every other usage error here
        self.exit(2, f"{self.prog}: error: {message}\n")


def _cmd_build(args: argparse.Namespace) -> int:
    from .build import build

    result = build(args.path, backend=args.backend, jobs=args.jobs, verbose=args.verbose)
    print(result.path)
    if args.wheel:
        from .build import check_abi
        from .wheel import build_wheel

        portable = not any(p.startswith("manylinux") for so in result.path.glob("*.so") for p in check_abi(so))
        print(build_wheel(result.path, args.wheel_dir, manylinux="manylinux_2_28" if portable else None))
    return 0


def _cmd_variants(args: argparse.Namespace) -> int:
    from .config import load_config
    from .layout import variant_dirs
    from .platform import System
    from .variants import resolve, system_variants

    load_config(args.path)  # validates build.toml: errors exit 2 naming file, table and key
    system = System.current()
    try:
        _, found = variant_dirs(args.path)
    except HubkernelsError:
        found = {}
    acceptable = [str(v) for v in system_variants(system, args.backend)]
    resolution = resolve(found, system, args.backend)
    if args.json:
        print(json.dumps({"system": acceptable, "chosen": str(resolution.chosen) if resolution.chosen else None,
                          "trace": [{"variant": str(e.variant), "accepted": True} if hasattr(e, "variant")
                                    else {"variant": e.name, "accepted": False, "reason": e.reason}
                                    for e in resolution.trace]}, indent=2))
        return 0
    print("This system accepts, best first:")
    for name in acceptable:
        print(f"  {name}")
    print(f"\nBuilt variants in {args.path}:")
    print(resolution.describe())
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hubkernels", description="Build, publish and load kernels through the Hugging Face Hub.")
    from ._version import __version__

    parser.add_argument("--version", action="version", version=f"hubkernels {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("build", help="compile the kernel for this machine into build/<variant>/")
    p.add_argument("path", nargs="?", default=".", help="kernel root (holds build.toml)")
    p.add_argument("--backend", help="build this backend instead of the machine's (e.g. cpu)")
    p.add_argument("-j", "--jobs", type=int, help="parallel compile jobs")
    p.add_argument("-v", "--verbose", action="store_true", help="show every compiler command")
    p.add_argument("--wheel", action="store_true", help="also package the variant as a wheel")
    p.add_argument("--wheel-dir", default="dist", help="where wheels go (default: dist/)")
    p.set_defaults(func=_cmd_build)
    p = sub.add_parser("variants", help="list the variants this system accepts and how each build resolves")
    p.add_argument("path", nargs="?", default=".", help="kernel root (holds build.toml)")
    p.add_argument("--backend", help="resolve for this backend (cpu or the system's)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_variants)
    for name in _PLUGGABLE:
        try:  # a stage whose optional dependencies are missing simply has no subcommand
            module = importlib.import_module(name)
            register = getattr(module, "register_cli", None)
            if register is not None:
                register(sub)
        except ImportError:
            continue
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except HubkernelsError as e:
        print(f"hubkernels {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
