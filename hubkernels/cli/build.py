"""`hubkernels build [PATH] [--wheel]`."""

from __future__ import annotations

import argparse

NAME = "build"
HELP = "compile the kernel for this machine into build/<variant>/"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("path", nargs="?", default=".", help="kernel root (holds build.toml)")
    p.add_argument("--backend", help="build this backend instead of the machine's (e.g. cpu)")
    p.add_argument("-j", "--jobs", type=int, help="parallel compile jobs")
    p.add_argument("-v", "--verbose", action="store_true", help="show every compiler command")
    p.add_argument("--wheel", action="store_true", help="also package the variant as a wheel")
    p.add_argument("--wheel-dir", default="dist", help="where wheels go (default: dist/)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from ..build import CompileError, build, check_abi

    try:
        result = build(args.path, backend=args.backend, jobs=args.jobs, verbose=args.verbose)
    except CompileError as e:  # the compiler's own output, then exit 1 (a bad input or setup exits 2)
        print(f"hubkernels build: error: {e}", file=sys.stderr)
        return 1
    for built in (result, *result.also):  # a noarch kernel builds every listed backend in one run
        print(built.path)
        if args.wheel:
            from ..wheel import build_wheel

            portable = not any(p.startswith("manylinux") for so in built.path.glob("*.so") for p in check_abi(so))
            print(build_wheel(built.path, args.wheel_dir, manylinux="manylinux_2_28" if portable else None))
    return 0
