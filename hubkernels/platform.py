"""The former name of `hubkernels.system` (inside the package it shadowed the standard library's `platform`).
A thin re-export, kept until every branch imports `hubkernels.system`."""

from .system import BACKENDS, System, Variant, normalize_cpu

__all__ = ["BACKENDS", "System", "Variant", "normalize_cpu"]
