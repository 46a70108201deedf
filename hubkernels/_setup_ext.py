"""Compile one native module from a JSON spec with torch.utils.cpp_extension (run by `hubkernels build`).

Runs in its own process so compiler output streams to the caller and a failed build leaves the builder
process clean. Uses setuptools' build_ext with torch's BuildExtension, which drives ninja.
"""

from __future__ import annotations

import json
import sys


def main(spec_path: str) -> None:
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    spec = json.loads(open(spec_path).read())
    make = CUDAExtension if spec["cuda"] else CppExtension
    ext = make(
        name=spec["name"],
        sources=spec["sources"],
        include_dirs=spec["include_dirs"],
        extra_compile_args={"cxx": spec["cxx"], "nvcc": spec["nvcc"]} if spec["cuda"] else {"cxx": spec["cxx"]},
        extra_link_args=spec.get("link", []),
        py_limited_api=True,
    )
    setup(
        name=spec["name"],
        ext_modules=[ext],
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
        script_args=["-q", "build_ext", "--build-lib", spec["build_lib"], "--build-temp", spec["build_temp"]],
    )


if __name__ == "__main__":
    main(sys.argv[1])
