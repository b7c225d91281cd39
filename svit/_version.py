"""The release number, in one place: the build, `svit.__version__` and `svit --version` read it."""

__all__ = ["__version__"]

__version__ = "0.1.0"
