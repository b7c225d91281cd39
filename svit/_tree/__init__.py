"""The tree core, one concept per module; :mod:`svit.tree` is its public face."""

__all__: list[str] = []
