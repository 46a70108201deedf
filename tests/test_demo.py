"""`hubkernels demo` runs on a hubkernels checkout's ltx-kernels (./dev demo, from the repository root); anywhere
else it says so in one line and exits 2, before building or starting anything. (The demo itself: `./dev demo`.)"""

from __future__ import annotations

import subprocess
import sys


def test_demo_outside_a_checkout_says_where_to_run_it(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hubkernels", "demo", str(tmp_path), "--workdir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"hubkernels demo: error: {tmp_path} is not a hubkernels checkout")
    assert "run it from the repository root" in done.stderr
    assert not (tmp_path / "work").exists()  # nothing started
