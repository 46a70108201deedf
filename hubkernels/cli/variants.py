"""`hubkernels variants [PATH]`: the variants this system accepts and how each built one resolves."""

from __future__ import annotations

import argparse
import json

NAME = "variants"
HELP = "list the variants this system accepts and how each build resolves"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("path", nargs="?", default=".", help="kernel root (holds build.toml)")
    p.add_argument("--backend", help="resolve for this backend (cpu or the system's)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..errors import HubkernelsError
    from ..layout import variant_dirs
    from ..system import System
    from ..variants import DIFFERENCES, KERNELS_COMPAT, resolve, system_variants

    load_config(args.path)  # validates build.toml: errors exit 2 naming file, table and key
    system = System.current()
    try:
        _, found = variant_dirs(args.path)
    except HubkernelsError:
        found = {}
    acceptable = [str(v) for v in system_variants(system, args.backend)]
    resolution = resolve(found, system, args.backend)
    if args.json:
        print(
            json.dumps(
                {
                    "system": acceptable,
                    "chosen": str(resolution.chosen) if resolution.chosen else None,
                    "trace": [
                        {"variant": str(e.variant), "accepted": True}
                        if hasattr(e, "variant")
                        else {"variant": e.name, "accepted": False, "reason": e.reason}
                        for e in resolution.trace
                    ],
                    "differences_from_kernels": list(DIFFERENCES),
                },
                indent=2,
            )
        )
        return 0
    print("This system accepts, best first:")
    for name in acceptable:
        print(f"  {name}")
    print(f"\nBuilt variants in {args.path}:")
    print(resolution.describe())
    print(f"\nThe same choice as HF kernels {'.'.join(map(str, KERNELS_COMPAT))}, except:")
    for line in DIFFERENCES:
        print(f"  - {line}")
    return 0
