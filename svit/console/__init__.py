"""What a person sees: a bounded tree drawing, the line REPL and ``svit console``.

``render_tree`` works on anything with the process host API (the REPL is :mod:`svit.repl`). The terminal
console (:mod:`svit.console.app`, the ``console`` extra: Textual) is imported only when
asked for, so ``import svit.console`` needs no extra.
"""

from .tree import MAX_CHILDREN, PREVIEW, render_tree

__all__ = ["MAX_CHILDREN", "PREVIEW", "render_tree"]
