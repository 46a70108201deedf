"""`hubkernels serve`: run the local Hub (`hubkernels.server.serve`), and manage its tokens (`serve token ...`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import HubkernelsError, UsageError

NAME = "serve"
HELP = "run a Hub-compatible server (git-backed) for publishing and loading kernels locally"
ROOT_HELP = "directory of the repositories and tokens.json"


def run(args: argparse.Namespace) -> int:
    if args.port < 0 or args.port > 65535:
        raise UsageError(f"invalid --port {args.port}: use 0-65535 (0 picks a free port)")
    if args.max_body_mb < 1 or args.read_timeout <= 0:
        raise UsageError("--max-body-mb must be >= 1 and --read-timeout > 0")
    from ..server import Limits, serve  # needs the serve extra: a one-line error names it

    try:
        serve(
            host=args.host,
            port=args.port,
            root=args.root,
            trusted_orgs=args.trusted_orgs,
            log_level=args.log_level,
            lfs_threshold=None if args.lfs_threshold < 0 else args.lfs_threshold,
            test_mode=args.test_mode,
            limits=Limits(max_body_bytes=args.max_body_mb << 20, read_timeout_s=args.read_timeout),
            on_listening=_print_url,
        )
    except HubkernelsError:
        raise
    except (OSError, ValueError) as exc:  # the port is taken, a root that cannot be written, ...
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        pass
    return 0


def _print_url(url: str, root: Path, has_token: bool) -> None:
    print(f"Hub listening on {url} (root {root})", flush=True)
    if not has_token:
        print(
            f"No token yet: clients can only read. For HF_TOKEN: hubkernels serve token create --user NAME "
            f"--org ORG --write --root {root}",
            file=sys.stderr,
            flush=True,
        )


def run_token(args: argparse.Namespace) -> int:
    from ..server import TokenStore

    try:
        store = TokenStore(args.root)
        if args.token_command == "create":
            args.root.mkdir(parents=True, exist_ok=True)
            print(store.create(args.user, args.orgs, write=args.write, admin=args.admin, name=args.name))
        elif args.token_command == "list":
            tokens = store.list()
            if args.json:
                print(json.dumps(tokens, indent=1))
            for t in [] if args.json else tokens:
                print(
                    f"{t['id']}  {t['user']:<20} {t['role']:<5}{' admin' if t['admin'] else ''}  "
                    f"orgs: {','.join(t['orgs']) or '-'}  {t['name']}"
                )
        elif not store.revoke(args.token):
            raise UsageError(f"no token {args.token!r} in {args.root}: see `hubkernels serve token list`.")
    except OSError as exc:
        raise UsageError(f"cannot use --root {args.root}: {exc}") from None
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        NAME,
        help=HELP,
        description="Run a Hugging Face Hub-compatible HTTP server that stores repositories as git repos under "
        "--root. Point clients at it with HF_ENDPOINT=<printed URL> and HF_TOKEN=<a token from "
        "`hubkernels serve token create`>; large files travel through Xet (huggingface_hub with hf_xet) "
        "or the LFS batch API (clients without hf_xet). Anonymous clients read public repositories only. "
        "Needs the serve extra: pip install 'hubkernels[serve]'.",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1); any other than loopback needs a token first",
    )
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default 0)")
    parser.add_argument(
        "--root", type=Path, default=None, help=f"{ROOT_HELP} (default: a temporary one, deleted on exit)"
    )
    parser.add_argument(
        "--trusted-org",
        dest="trusted_orgs",
        action="append",
        default=[],
        metavar="ORG",
        help="organization reported as a trusted kernel publisher (repeatable)",
    )
    parser.add_argument(
        "--lfs-threshold",
        type=int,
        default=1024,
        metavar="BYTES",
        help="files of this size or more are uploaded as large files (Xet or LFS); -1 inlines "
        "every file in the commit (default 1024)",
    )
    parser.add_argument(
        "--max-body-mb",
        type=int,
        default=64,
        metavar="MIB",
        help="largest JSON/NDJSON request body accepted, in MiB (default 64)",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="drop a client silent this long while sending its request (default 60)",
    )
    parser.add_argument(
        "--test-mode",
        action="store_true",
        help="enable the /_hubkernels/ control routes (request log, fault injection, trusted "
        "orgs) for admin tokens; for test rigs only",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn log level (default warning)",
    )
    parser.set_defaults(func=run)
    _register_token(parser.add_subparsers(dest="serve_command", metavar="{token}"))


def _register_token(subparsers: argparse._SubParsersAction) -> None:
    token = subparsers.add_parser(
        "token",
        help="create, list or revoke the hub's access tokens",
        description="Manage the tokens of a hub root (stored hashed in ROOT/tokens.json; "
        "a running hub sees changes at once).",
    )
    actions = token.add_subparsers(dest="token_command", metavar="{create,list,revoke}", required=True)
    create = actions.add_parser("create", help="create a token and print it (once)")
    create.add_argument("--user", required=True, help="the token's user (it owns the namespace of its name)")
    create.add_argument(
        "--org",
        dest="orgs",
        action="append",
        default=[],
        metavar="ORG",
        help="an organization the user belongs to (repeatable)",
    )
    create.add_argument("--write", action="store_true", help="a write token (default: read-only)")
    create.add_argument("--admin", action="store_true", help="may use the --test-mode control routes")
    create.add_argument("--name", default="", help="a label shown by `token list`")
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    revoke = actions.add_parser("revoke", help="revoke a token by its id (from `token list`) or its text")
    revoke.add_argument("token", help="token id or token text")
    for sub in (create, listing, revoke):
        sub.add_argument("--root", type=Path, required=True, help=ROOT_HELP)
        sub.set_defaults(func=run_token)
