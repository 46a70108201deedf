"""The hubkernels version, in a module every stage may import without importing the package face."""

__version__ = "0.1.0"
