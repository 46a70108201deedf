"""Compile one native module from a JSON spec with torch.utils.cpp_extension (run by `hubkernels build`).

Runs in its own process so compiler output streams to the caller and a failed build leaves the builder
process clean. Uses setuptools' build_ext with torch's BuildExtension, which drives ninja, minus its
`TORCH_API_INCLUDE_EXTENSION_H` define: that define makes `<torch/torch.h>` pull in pybind11 and the full
Python API, which the limited API of an `.abi3.so` lacks (kernel-builder's CMake flow never sets it).
Sources compile in groups (the binding, then each `[kernel.*]`), each group with its own flags and include
directories added to the common ones and its own ninja file under `build_temp/<group>/`, so per-kernel flags
reach that kernel's sources only and every group rebuilds incrementally; one link joins all objects.
Failures end with one `error:` line and exit 1, never a Python traceback.
"""

from __future__ import annotations

import json
import sys

_DROPPED_FLAGS = ("-DTORCH_API_INCLUDE_EXTENSION_H",)


def main(spec_path: str) -> None:
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    class KernelBuildExtension(BuildExtension):
        """BuildExtension without the flags that tie a module to torch's Python bindings."""

        def _add_compile_flag(self, extension, flag):
            if flag not in _DROPPED_FLAGS:
                super()._add_compile_flag(extension, flag)

        def build_extension(self, ext):
            whole = self.compiler.compile  # torch's ninja compile: one flag set per call

            def by_group(sources, output_dir=None, include_dirs=None, extra_postargs=None, **kw):
                objects, failed = [], None
                for group in spec.get("groups") or [{"name": ".", "sources": sources}]:
                    post = extra_postargs
                    if isinstance(post, dict):
                        post = {k: [*v, *group.get(k, [])] for k, v in post.items()}
                    try:
                        objects += whole(
                            group["sources"],
                            output_dir=os.path.join(output_dir, group["name"]),
                            include_dirs=[*(include_dirs or []), *group.get("include_dirs", [])],
                            extra_postargs=post,
                            **kw,
                        )
                    except Exception as e:  # noqa: BLE001  (compile the other groups too: show all their errors)
                        failed = failed or e
                if failed is not None:
                    raise failed
                return objects

            self.compiler.compile = by_group
            try:
                super().build_extension(ext)
            finally:
                self.compiler.compile = whole

    with open(spec_path) as f:
        spec = json.load(f)
    import os

    import torch

    # A stable-ABI CUDA module built against a CPU torch's stable headers (any torch from its target on serves it)
    # links the CUDA runtime and, through the stubs the spec names, torch's CUDA library.
    stable_cuda = spec["cuda"] and spec.get("stable") and torch.version.cuda is None
    make = CUDAExtension if spec["cuda"] and not stable_cuda else CppExtension
    # Link stubs first on the library path (a stable-ABI build), then the libraries they stand for.
    extra: dict = {"libraries": list(spec.get("libraries", [])), "library_dirs": list(spec.get("library_dirs", []))}
    if stable_cuda:
        from torch.utils import cpp_extension

        from hubkernels import settings

        home = str(settings.cuda_home() or "")
        cpp_extension.CUDA_HOME = home or None  # a CPU torch never looks for a toolkit; nvcc compiles the .cu files
        extra["libraries"].append("cudart")
        extra["library_dirs"] += [d for d in (f"{home}/lib64", f"{home}/lib") if os.path.isdir(d)]
    ext = make(
        name=spec["name"],
        sources=spec["sources"],
        include_dirs=spec["include_dirs"],
        extra_compile_args={"cxx": spec["cxx"], "nvcc": spec["nvcc"]} if spec["cuda"] else {"cxx": spec["cxx"]},
        extra_link_args=spec.get("link", []),
        py_limited_api=True,
        **extra,
    )
    setup(
        name=spec["name"],
        ext_modules=[ext],
        cmdclass={"build_ext": KernelBuildExtension.with_options(use_ninja=True)},
        script_args=["-q", "build_ext", "--build-lib", spec["build_lib"], "--build-temp", spec["build_temp"]],
    )


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except SystemExit as e:
        if e.code not in (None, 0):
            print(f"error: {e.code}" if isinstance(e.code, str) else f"error: exit status {e.code}", flush=True)
            raise SystemExit(1) from None
    except BaseException as e:  # noqa: BLE001  (the compiler's output is above; a traceback adds nothing)
        print(f"error: {type(e).__name__}: {e}", flush=True)
        raise SystemExit(1) from None
