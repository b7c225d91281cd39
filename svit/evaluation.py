"""Read-only evaluation: run one-off source against the committed state, commit nothing.

``evaluate(source, input)`` takes the source ``exec_inline`` takes (a script defining
``main(input)``) and runs it the same way, on a working copy of the committed root, but
every operation that would change something is refused before it happens: ``write`` and
``remove`` (of ``/memory``, ``/lib`` or a mount), ``send!``, and ``port-call`` (a port is
an external effect, and an evaluation makes none). The refusal is
:class:`~svit.errors.ReadOnlyEvaluation`, a hard failure no safe helper captures, so a
form either runs without wanting a change or fails naming the change it wanted. Reads,
``discover``, ``stat``, ``search``, ``jq``, ``log-info!`` and nested ``exec`` of scripts
that only read all work. Nothing is committed, so no version, no hook, no sink.

The refusal lives in a subclass of the activation's working state that overrides the
four changing guest functions (guest functions are looked up by name on the state), so
the activation path itself is not touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import tree
from .activation import INLINE_NAME, Activation, WorkingState, compile_check
from .builtins import bind_implementations
from .errors import InvalidValue, ReadOnlyEvaluation

if TYPE_CHECKING:
    from .process import Process

__all__ = ["ReadOnlyState", "evaluate"]


def _target(operation: str, target: Any) -> str:
    """``operation target`` when the target is text, else the operation alone."""
    return f"{operation} {target}" if type(target) is str else operation


class ReadOnlyState(WorkingState):
    """A working state whose changing guest functions refuse, naming what was asked."""

    def fn_write(self, path: Any, value: Any) -> Any:
        raise ReadOnlyEvaluation(_target("write", path))

    def fn_remove(self, path: Any) -> Any:
        raise ReadOnlyEvaluation(_target("remove", path))

    def fn_send(self, address: Any, body: Any) -> Any:
        raise ReadOnlyEvaluation(_target("send!", address))

    def fn_port_call(self, name: Any, input_value: Any) -> Any:
        port = f"/ports/{name}" if type(name) is str else None
        raise ReadOnlyEvaluation(_target("port-call", port))


bind_implementations(ReadOnlyState)


def evaluate(process: Process, source: str, input: Any = None) -> Activation:
    """Run ``main(input)`` of ``source`` read-only against ``process``'s committed state.

    Returns an :class:`Activation` with ``committed=False``, the process's unchanged
    version and root hash, the output and logs, and no messages or changed paths.
    """
    if type(source) is not str:
        raise InvalidValue("inline source must be text")
    compile_check(INLINE_NAME, source, process.limits)
    input_node = tree.from_value(input, scripts_allowed=False)
    tree.validate_value(input_node, process.limits, scripts_allowed=False)
    with process.lock:  # one consistent committed root for the whole run
        version, root_hash = process.version, process.root_hash
        state = ReadOnlyState(process, dry_run=True)
        output = state.run(INLINE_NAME, source, input_node)
    return Activation(
        output=output.to_value(),
        logs=state.logs,
        messages=[],
        version=version,
        root_hash=root_hash,
        changed=[],
        committed=False,
    )
