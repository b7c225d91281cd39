"""Raising a KeyboardInterrupt at one chosen instruction, and asking whether a lock was left free.

CPython runs a signal's handler between instructions (as a call returns, as a function
starts), so the interrupt tests place one KeyboardInterrupt before a chosen instruction of
a chosen function, run an operation, and check from another thread that no lock stayed held.
"""

from __future__ import annotations

import threading
from types import CodeType, FrameType
from typing import Any

__all__ = ["free_from_another_thread", "interrupt_at"]


def interrupt_at(code: CodeType, offset: int) -> tuple[Any, list[bool]]:
    """A trace function raising KeyboardInterrupt once, before the instruction at ``offset``
    of ``code``, and a one-item list that says whether it fired."""
    fired = [False]

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode" and not fired[0] and frame.f_lasti == offset:
            fired[0] = True
            raise KeyboardInterrupt
        return local

    def global_trace(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is code and not fired[0]:
            frame.f_trace_opcodes = True
            return local
        return None

    return global_trace, fired


def free_from_another_thread(lock: Any, timeout: float) -> bool:
    """Whether another thread takes ``lock`` (and gives it back) within ``timeout`` seconds."""
    result: list[bool] = []

    def probe() -> None:
        got = lock.acquire(timeout=timeout)
        if got:
            lock.release()
        result.append(got)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(timeout + 10)
    return bool(result) and result[0]
