"""Extract the symbol table of each torch wheel named into hubkernels/builder/torch_symbols/ (a maintainer's
command; the load check resolves against these tables):

    python scripts/torch_symbols.py torch-2.12.1-cp312-cp312-manylinux_2_28_x86_64.whl ...
"""

from __future__ import annotations

import sys

from hubkernels.builder.symbols import extract_wheel, write_table


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python scripts/torch_symbols.py TORCH_WHEEL...", file=sys.stderr)
        return 2
    for wheel in argv:
        table = extract_wheel(wheel)
        out = write_table(table)
        n = sum(len(lib.exports) for lib in table.libraries.values())
        print(f"{out.name}: {table.label}, {len(table.libraries)} libraries, {n} exports")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
