"""`hubkernels download ORG/NAME[@vN|@REV]`: download and verify this machine's variant; prints its directory."""

from __future__ import annotations

import argparse

NAME = "download"
HELP = "download and verify a Hub kernel's variant for this machine"


def kernel_command(
    sub: argparse._SubParsersAction,
    name: str,
    help: str,
    backend: str,
) -> argparse.ArgumentParser:
    """A command over one Hub kernel: its `ORG/NAME[@vN|@REV]` and `--backend`."""
    p = sub.add_parser(name, help=help)
    p.add_argument("kernel", help="org/name, org/name@v<N> or org/name@<revision>")
    p.add_argument("--backend", help=backend)
    return p


def register(sub: argparse._SubParsersAction) -> None:
    p = kernel_command(sub, NAME, HELP, "choose the variant for this backend (cpu or the machine's)")
    p.add_argument("--trust-remote-code", action="store_true", help="load even if the publisher is not trusted")
    p.add_argument("--force", action="store_true", help="download again even if cached (repairs a damaged cache)")
    p.add_argument(
        "--build",
        action="store_true",
        default=None,
        help="if no published variant fits this machine, build the published source here",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..fetch import install_kernel, parse_spec

    repo_id, version, revision = parse_spec(args.kernel)
    path = install_kernel(
        repo_id,
        version=version,
        revision=revision,
        backend=args.backend,
        trust_remote_code=bool(args.trust_remote_code),
        force_download=args.force,
        build=args.build,
    )
    print(path)
    return 0
