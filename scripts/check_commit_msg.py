"""Commit-msg hook (pre-commit): a subject of at most 72 characters, then an empty line before any body."""

import sys

lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
lines = [line for line in lines if not line.startswith("#")]
if len(lines[0]) > 72 or (len(lines) > 1 and lines[1].strip()):
    sys.exit(f"commit subject of {len(lines[0])} characters: keep it to 72, then an empty line and a body")
