"""Svit: an embedded scripting sandbox for agents.

A process is one addressable tree of values; scripts in Svit Lisp run as activations
that commit memory, library edits and message intents together, or nothing.
"""

from ._ports import PortContext, PortDescriptor, PortError, Ports, failure_text
from ._version import __version__
from .activation import Activation
from .errors import SvitError
from .limits import Limits
from .mounts import Mount
from .process import ActivationEvent, ActivationRequest, Cancel, Change, CommitSink, Process, ProcessBuilder, Transition
from .protocol import HostedProcess, ProcessLike
from .values import Script

__all__ = [
    "Activation",
    "ActivationEvent",
    "ActivationRequest",
    "AsyncSvit",
    "Cancel",
    "Change",
    "CommitSink",
    "HostedProcess",
    "Limits",
    "Message",
    "Mount",
    "PortContext",
    "PortDescriptor",
    "PortError",
    "Ports",
    "Process",
    "ProcessBuilder",
    "ProcessLike",
    "Script",
    "Svit",
    "SvitError",
    "Transition",
    "__version__",
    "failure_text",
]
from .loop import AsyncSvit, Message, Svit
