"""Build configuration for the optional native tree builder (everything else is in pyproject.toml).

``svit._treecore`` is optional: where no C compiler is available the install still
succeeds and ``svit.tree`` uses its pure-Python builder (same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "svit._treecore",
            sources=["svit/_treecore.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
