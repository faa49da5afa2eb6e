"""The library's version, in a module of its own: the runtime records it in every ``.nnc`` without
importing the package's ``__init__`` (which imports the runtime)."""

__version__ = "0.1.0"
