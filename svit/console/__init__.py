"""What a person sees: a bounded tree drawing, the line REPL and ``svit console``.

``render_tree`` and ``Repl`` work on anything with the process host API. The terminal
console (:mod:`svit.console.app`, the ``console`` extra: Textual) is imported only when
asked for, so ``import svit.console`` needs no extra.
"""

from ._repl_legacy import HELP, Repl, balanced
from .tree import MAX_CHILDREN, PREVIEW, render_tree

__all__ = ["HELP", "MAX_CHILDREN", "PREVIEW", "Repl", "balanced", "render_tree"]
