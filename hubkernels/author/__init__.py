"""Tools for kernel authors: `scaffold` (`hubkernels init`), `skill_install` and the agent skill in `skill/`
(`hubkernels skill`), `verify` (`hubkernels verify`) and `bench`, the benchmarks a kernel declares."""
