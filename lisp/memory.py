"""What a run holds at once: the guest memory meter.

Each value a system function builds is measured on its own when it is made (see
:class:`~lisp.context.Context`). The meter bounds what a run holds *in total*: every
allocation adds to a running count, and whenever the count has grown by a quarter of
the limit since the last look, the meter measures what the run really holds and
refuses to go on (``LimitError("guest memory")``) if that passes the limit.

What the run holds is found from the host side, never shown to guest code: the values
reachable from the guest globals of every namespace taking part in the run and from
the locals of every Python frame between the run's entry and the allocation (generated
code and the system functions it called), each distinct list, long text and function
counted once. Values a frame is holding on its evaluation stack (arguments already
computed for a call still being evaluated) cannot be seen; for those the meter reads
the frame's bytecode: a frame whose stack holds a computed value at its current call
is charged every unit allocated while that value could have been made (since the
frame was last seen holding nothing, or since it started its current statement),
until it is seen again holding nothing or has returned.
"""

from __future__ import annotations

import bisect
import dis
import sys
import weakref
from fractions import Fraction
from types import CodeType, FrameType, FunctionType
from typing import Any, Iterable

from .errors import LimitError
from .names import global_name
from .values import Char, Foreign, Keyword, LispList, LispPath, Name, Quoted

__all__ = [
    "CHAR_UNITS",
    "CHECK_FRACTION",
    "FUNCTION_UNITS",
    "LIST_UNIT",
    "MIN_CHECK_INTERVAL",
    "SPACING",
    "VALUES_PER_STEP",
    "Meter",
    "enter_space",
    "leave_space",
]

#: Units of a list element (as the per-value measure counts it).
LIST_UNIT = 8
#: Units of a function the script made (the object and its code's closure).
FUNCTION_UNITS = 128
#: Units of a character that is not shared (a Char beyond Latin-1 and its own text).
CHAR_UNITS = 128
#: Texts shorter than this are counted wherever they occur (not deduplicated).
_SHARED_TEXT = 256
#: The measure charges one step per this many values visited.
VALUES_PER_STEP = 64
#: The meter looks again after at least this fraction of the limit was allocated.
CHECK_FRACTION = 2
#: ... but never more often than every this many units.
MIN_CHECK_INTERVAL = 4096
#: After a measure that visited n values, the next waits for SPACING * n units (at most the limit).
SPACING = 16

_STR_HEADER = sys.getsizeof("")
#: Lists of numbers or short texts at least this long are remembered between looks.
_REMEMBERED = 1024
_ATOMS = frozenset((int, float, bool, type(None), Fraction))
_TEXTS = frozenset((str,))
_OWN_MODULES = frozenset((__name__, f"{__package__}.context"))


class Meter:
    """The running total of one run (shared by its nested runs) and its last measure."""

    __slots__ = (
        "limit", "interval", "total", "next_check", "last_clock", "entry", "depth",
        "spaces", "records", "leaves", "checks",
    )

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # max(limit // CHECK_FRACTION, MIN_CHECK_INTERVAL), written out (one meter per activation).
        interval = limit // CHECK_FRACTION
        if interval < MIN_CHECK_INTERVAL:
            interval = MIN_CHECK_INTERVAL
        self.interval = interval
        #: Units allocated by the run so far (never decreases).
        self.total = 0
        self.next_check = interval
        self.last_clock = 0
        #: The frame that entered the outermost run; frames above it are the host's.
        self.entry: FrameType | None = None
        self.depth = 0
        #: Namespaces taking part (each an Interpreter), with how often each is entered:
        #: ``[space, count]`` pairs, one per namespace, the one entered last at the end
        #: (a few at most; a run in one namespace, the common case, has one).
        self.spaces: list[list[Any]] = []
        #: id(frame) -> (frame, lasti, child, since, until) from the last measure.
        self.records: dict[int, tuple[FrameType, int, Any, int, int]] = {}
        #: Long immutable lists of plain values measured by the last look (see _measure).
        self.leaves: dict[int, tuple[LispList, int]] = {}
        self.checks = 0

    # ------------------------------------------------------------------ runs
    def open(self, space: Any, frame: FrameType) -> None:
        """A run in ``space`` starts at ``frame`` (nested runs share the outermost entry).

        The interpreter's run guard does the same, written out (so does its exit, for :meth:`close`).
        """
        if self.depth == 0:
            self.entry = frame
        self.depth += 1
        enter_space(self.spaces, space)

    def close(self, space: Any) -> None:
        self.depth -= 1
        leave_space(self.spaces, space)
        if self.depth <= 0:
            self.depth = 0
            self.entry = None
            self.records = {}
            self.leaves = {}

    # ------------------------------------------------------------------ the check
    def check(self, context: Any, units: int) -> None:
        """Measure what the run holds; refuse if it and ``units`` more pass the limit."""
        clock = self.total - units  # the allocation asked for is not made yet
        self.next_check = self.total + self.interval
        entry = self.entry
        if entry is None:
            return
        self.checks += 1
        frames = _frames_below(sys._getframe(1), entry)  # noqa: SLF001 (CPython's documented frame access)
        hidden, records = self._hidden(frames, clock)
        allowed = self.limit - units - hidden
        if allowed < 0:
            raise LimitError("guest memory")
        spaces = {id(space.globals) for space, _count in self.spaces}
        seen = self._free()
        # The frame asking may already hold what it asks for (some functions build, then
        # charge): what it holds beyond its callers counts as at least the units asked.
        inner, outer = (frames[:1], frames[1:]) if frames else ([], [])
        leaves: dict[int, tuple[LispList, int]] = {}
        held, visited = _measure(self._roots(outer, True), seen, allowed, spaces, self.leaves, leaves)
        if held <= allowed:
            own, more = _measure(self._roots(inner, False), seen, self.limit - hidden - held, spaces, self.leaves, leaves)
            visited += more
            held += max(0, own - units)
        self.records = records
        self.leaves = leaves
        self.last_clock = clock
        # Amortise: the next look waits for as many units as were found held (or as the
        # values visited call for), never more than the limit: what is held between two
        # looks stays within twice the limit.
        self.next_check = self.total + min(max(self.interval, held, SPACING * visited), self.limit)
        if visited >= VALUES_PER_STEP:
            context.budget.charge(visited // VALUES_PER_STEP)
        if held > allowed:
            raise LimitError("guest memory")

    def _hidden(self, frames: list[FrameType], clock: int) -> tuple[int, dict[int, tuple[FrameType, int, Any, int, int]]]:
        """Units possibly held on frames' evaluation stacks, and the new frame records."""
        previous = self.records
        prev = self.last_clock
        records: dict[int, tuple[FrameType, int, Any, int, int]] = {}
        windows: list[tuple[int, int]] = []
        child: Any = None
        for frame in frames:  # innermost first
            lasti = frame.f_lasti
            holding = _holds_values(frame.f_code, lasti)
            if not holding:
                records[id(frame)] = (frame, lasti, child, clock, clock)
            else:
                rec = previous.get(id(frame))
                if rec is None or rec[0] is not frame:
                    since, until = prev, clock  # a new frame: it began after the last look
                elif rec[1] == lasti and rec[2] is child:
                    since, until = rec[3], rec[4]  # the same call is still running
                elif rec[1] == lasti:
                    since, until = prev, clock  # the same call site again: a new statement
                else:
                    since, until = rec[3], clock  # the statement may have gone on
                records[id(frame)] = (frame, lasti, child, since, until)
                if until > since:
                    windows.append((since, until))
            child = frame
        return _covered(windows), records

    def _roots(self, frames: list[FrameType], with_globals: bool) -> list[Any]:
        roots: list[Any] = []
        for space, _count in self.spaces if with_globals else ():
            # Guest globals and top-level let bindings (module code keeps them as globals);
            # the rest are system functions and host values, which count nothing, and the
            # compiler's own references to guest functions (typed entries), not counted.
            roots.extend(value for name, value in space.globals.items() if not name.startswith(_COMPILER_OWN))
        for frame in frames:
            if frame.f_code.co_flags & _OPTIMIZED:
                local = frame.f_locals
                roots.extend(local.values())
                local.clear()  # a snapshot of the locals: do not keep values alive
        return roots

    def _free(self) -> set[int]:
        """Ids of what the host put in: installed values and compiled constants."""
        free: set[int] = set()
        for space, _count in self.spaces:
            g = space.globals
            for name in space.host_values:
                value = g.get(global_name(name))
                if value is not None:
                    free.add(id(value))
            for key, value in g.items():
                if key.startswith("_K") and type(value) is tuple:
                    free.add(id(value))
                    free.update(map(id, value))
        return free


#: Module globals the compiler adds besides the guest's (see lisp.compiler.TypedBody).
_COMPILER_OWN = ("_typed", "_self", "_ranked")
_OPTIMIZED = 0x0001  # CO_OPTIMIZED: a function frame (a module frame's locals are its globals)




def enter_space(spaces: list[list[Any]], space: Any) -> None:
    """Count one more run entered in ``space`` (added at the end when it takes no part yet)."""
    for entry in spaces:
        if entry[0] is space:
            entry[1] += 1
            return
    spaces.append([space, 1])


def leave_space(spaces: list[list[Any]], space: Any) -> None:
    """Count one run left in ``space``, which takes no part once none is left."""
    for index in range(len(spaces) - 1, -1, -1):
        entry = spaces[index]
        if entry[0] is space:
            entry[1] -= 1
            if entry[1] <= 0:
                del spaces[index]
            return


def _frames_below(frame: FrameType | None, entry: FrameType) -> list[FrameType]:
    """Python frames from the innermost up to (not including) the run's entry frame."""
    found: list[FrameType] = []
    while frame is not None and frame is not entry:
        if frame.f_globals.get("__name__") not in _OWN_MODULES:
            found.append(frame)
        frame = frame.f_back
    return found


def _covered(windows: list[tuple[int, int]]) -> int:
    """The length of the union of half-open clock intervals."""
    if not windows:
        return 0
    windows.sort()
    total = 0
    start, end = windows[0]
    for a, b in windows[1:]:
        if a > end:
            total += end - start
            start, end = a, b
        elif b > end:
            end = b
    return total + end - start


# --- what a value holds -------------------------------------------------------------


def _measure(
    roots: Iterable[Any],
    seen: set[int],
    allowed: int,
    spaces: set[int],
    leaves_before: dict[int, tuple[LispList, int]],
    leaves: dict[int, tuple[LispList, int]],
) -> tuple[int, int]:
    """Units held by ``roots`` (each list, long text and function once), and values visited.

    Stops as soon as the total passes ``allowed``. Long lists of numbers or short texts
    measured by the last look (``leaves_before``, immutable, so still right) are not
    walked again; those met now are put in ``leaves`` for the next look.
    """
    total = 0
    visited = 0
    pending = list(roots)
    pop = pending.pop
    push = pending.extend
    while pending:
        value = pop()
        visited += 1
        t = type(value)
        if t is str:
            if len(value) >= _SHARED_TEXT:
                if id(value) in seen:
                    continue
                seen.add(id(value))
            total += sys.getsizeof(value) - _STR_HEADER
        elif t is tuple or t is list:
            if id(value) in seen:
                continue
            seen.add(id(value))
            total += LIST_UNIT * len(value)
            if t is tuple and len(value) >= _REMEMBERED:
                known = leaves_before.get(id(value))
                if known is not None and known[0] is value:
                    leaves[id(value)] = known
                    total += known[1]
                    if total > allowed:
                        break
                    continue
            kinds = set(map(type, value))
            if kinds <= _ATOMS:
                if t is tuple and len(value) >= _REMEMBERED:
                    leaves[id(value)] = (value, 0)
                continue  # numbers and truths: nothing beyond their slots
            if kinds == _TEXTS:
                # Short texts only (each counted where it occurs), measured without a loop here.
                sizes = list(map(len, value))
                if max(sizes) < _SHARED_TEXT:
                    inside = sum(sizes)
                    total += inside
                    visited += len(sizes) // 8
                    if t is tuple and len(value) >= _REMEMBERED:
                        leaves[id(value)] = (value, inside)
                    if total > allowed:
                        break
                    continue
            push(value)
        elif value is None or t is bool or t is int or t is float or t is Fraction:
            continue
        elif t is bytes:
            if len(value) >= _SHARED_TEXT:
                if id(value) in seen:
                    continue
                seen.add(id(value))
            total += len(value)
        elif t is Char:
            if len(value.char) == 1 and value.char < "\u0100":
                continue  # shared
            total += CHAR_UNITS
        elif t is Name or t is Keyword:
            total += len(value.name)
        elif t is Quoted:
            total += LIST_UNIT
            pending.append(value.value)
        elif t is LispPath:
            total += len(value.path)
        elif t is FunctionType:
            if id(value) in seen:
                continue
            seen.add(id(value))
            if id(value.__globals__) not in spaces:
                continue  # a system or host function: not the script's
            total += FUNCTION_UNITS
            cells = value.__closure__
            if cells:
                for cell in cells:
                    try:
                        pending.append(cell.cell_contents)
                    except ValueError:  # an empty cell
                        pass
            if value.__defaults__:
                push(value.__defaults__)
        elif isinstance(value, Foreign):
            if id(value) in seen:
                continue
            seen.add(id(value))
            total += value.memory_size()
        if total > allowed:
            break
    return total, visited


# --- what a frame's evaluation stack holds -------------------------------------------

#: Instructions whose result is a value some local, global or constant already holds.
_LOADS = frozenset(
    name
    for name in (
        "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_CONST", "LOAD_GLOBAL",
        "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_NAME", "PUSH_NULL", "LOAD_ASSERTION_ERROR",
        "LOAD_BUILD_CLASS", "LOAD_FAST_LOAD_FAST", "LOAD_SMALL_INT", "LOAD_CONST_IMMORTAL",
        "BEFORE_WITH",
    )
    if name in dis.opmap
)
#: Instructions whose result holds what their operands held (access, not construction).
_ACCESS = frozenset(
    name
    for name in ("LOAD_ATTR", "LOAD_METHOD", "BINARY_SUBSCR", "GET_ITER", "FOR_ITER", "LOAD_SUPER_ATTR")
    if name in dis.opmap
)
#: Instructions that push nothing (only pop).
_NO_PUSH = frozenset(
    name
    for name in dis.opmap
    if name.startswith(("STORE_", "DELETE_", "POP_JUMP", "JUMP", "RETURN", "RAISE", "RERAISE"))
    or name in (
        "POP_TOP", "LIST_APPEND", "SET_ADD", "MAP_ADD", "LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE",
        "DICT_MERGE", "NOP", "RESUME", "PRECALL", "KW_NAMES", "EXTENDED_ARG", "CACHE",
        "POP_EXCEPT", "PRINT_EXPR", "END_FOR", "COPY_FREE_VARS", "MAKE_CELL", "SETUP_ANNOTATIONS",
        "IMPORT_STAR", "POP_BLOCK", "SETUP_FINALLY", "SETUP_CLEANUP", "SETUP_WITH", "INSTRUMENTED_LINE",
    )
)
_CALLS = frozenset(name for name in ("CALL", "CALL_KW", "CALL_FUNCTION_EX") if name in dis.opmap)

_analysis: weakref.WeakKeyDictionary[CodeType, tuple[list[int], dict[int, bool]]] = weakref.WeakKeyDictionary()


#: Generated code's helpers that return numbers or truths (nothing guest memory counts).
_NUMERIC_HELPERS = frozenset(
    ("_add2", "_sub2", "_mul2", "_lt2", "_gt2", "_le2", "_ge2", "_equal", "_truth", "_not", "_case_match", "_type")
)
#: Operators that, in generated code, only ever produce numbers or truths.
_NUMERIC_OPERATORS = frozenset(
    name for name in ("BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP", "UNARY_NOT", "UNARY_NEGATIVE", "UNARY_INVERT")
    if name in dis.opmap
)
_NUMERIC = "numeric"  # the mark of a loaded numeric helper


def _holds_values(code: CodeType, lasti: int) -> bool:
    """Whether, at the call running at ``lasti``, the frame's stack holds a computed value.

    Unknown code or positions count as holding (the conservative answer).
    """
    found = _analysis.get(code)
    if found is None:
        try:
            found = _analyse(code)
        except Exception:
            found = ([], {})
        _analysis[code] = found
    offsets, holding = found
    i = bisect.bisect_right(offsets, lasti) - 1
    if i < 0:
        return True
    return holding.get(offsets[i], True)


def _analyse(code: CodeType) -> tuple[list[int], dict[int, bool]]:
    """For each call instruction, whether the stack below its operands holds a computed value.

    A symbolic run over the bytecode: each stack slot is marked computed (a call result,
    an operator result, a new container) or loaded (a local, global or constant, or
    something read out of one).
    """
    generated = not code.co_filename.endswith(".py")
    instructions = list(dis.get_instructions(code))
    offsets = [ins.offset for ins in instructions]
    index = {off: i for i, off in enumerate(offsets)}
    holding: dict[int, bool] = {}
    states: dict[int, tuple[bool, ...]] = {}
    work: list[tuple[int, tuple[bool, ...]]] = [(0, ())]
    while work:
        i, stack = work.pop()
        while i < len(instructions):
            ins = instructions[i]
            seen = states.get(ins.offset)
            if seen is not None:
                if len(seen) != len(stack):
                    raise ValueError("inconsistent stack depth")
                merged = tuple(a if a == b else (a is True or b is True) for a, b in zip(seen, stack))
                if merged == seen:
                    break
                stack = merged  # a path that holds more: follow it again
            states[ins.offset] = stack
            name = ins.opname
            arg = ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None
            if name == "PRECALL":
                # 3.11 pops a call's arguments at PRECALL (the CALL that follows pops the rest).
                below = stack[: len(stack) - (ins.arg or 0) - 2]
                if i + 1 < len(instructions):
                    holding[instructions[i + 1].offset] = True in below
            elif name in _CALLS and (i == 0 or instructions[i - 1].opname != "PRECALL"):
                below = stack[: len(stack) - (ins.arg or 0) - 2] if name != "CALL_FUNCTION_EX" else stack[:-3]
                holding[ins.offset] = True in below
            jumps = ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs
            if jumps and ins.argval in index:
                if name == "FOR_ITER":
                    after = stack[:-1]  # the exhausted iterator is dropped
                else:
                    after = _apply(stack, ins, dis.stack_effect(ins.opcode, arg, jump=True), generated)
                work.append((index[ins.argval], after))
            if name.startswith(("RETURN", "RAISE", "RERAISE")) or name in (
                "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE", "JUMP",
            ):
                break
            effect = dis.stack_effect(ins.opcode, arg, jump=False) if jumps else dis.stack_effect(ins.opcode, arg)
            stack = _apply(stack, ins, effect, generated)
            i += 1
    return offsets, holding


def _apply(stack: tuple[Any, ...], ins: dis.Instruction, effect: int, generated: bool) -> tuple[Any, ...]:
    """The stack after one instruction (True marks a computed value that may hold memory)."""
    name = ins.opname
    arg = ins.arg
    if name == "COPY" and arg:
        return stack + (stack[-arg] if len(stack) >= arg else True,)
    if name == "SWAP" and arg and len(stack) >= arg:
        items = list(stack)
        items[-1], items[-arg] = items[-arg], items[-1]
        return tuple(items)
    if name == "BEFORE_WITH":
        return stack[:-1] + (False, False)  # the manager's exit and its result
    if name in _NO_PUSH:
        pushes = 0
    elif name.startswith("BUILD_"):
        pushes = 1
    elif name in ("UNPACK_SEQUENCE", "UNPACK_EX"):
        pushes = effect + 1
    else:
        pushes = max(effect, 0) + 1 if name not in _LOADS else max(effect, 1)
    pops = pushes - effect
    if pops < 0:
        pops = 0
    popped = stack[len(stack) - pops:] if pops else ()
    kept = stack[: len(stack) - pops] if pops else stack
    mark: Any
    if name in _LOADS:
        mark = False
        if generated and name == "LOAD_GLOBAL" and ins.argval in _NUMERIC_HELPERS:
            return kept + (False,) * (pushes - 1) + (_NUMERIC,)
    elif name in _ACCESS or name in ("UNPACK_SEQUENCE", "UNPACK_EX"):
        mark = True in popped
    elif generated and name in _NUMERIC_OPERATORS:
        mark = False
    elif name in _CALLS and generated and _NUMERIC in popped[:2]:
        mark = False  # a numeric helper's result
    else:
        mark = True
    return kept + (mark,) * pushes
