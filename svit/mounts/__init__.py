"""Mounts: external resources exposed below ``/mounts/<name>`` through providers.

Only a mount's descriptor is process state; the data stays with the provider and never
enters the tree or a snapshot. The package holds mount paths (:mod:`.paths`), the
provider interface with descriptor validation, access checks and the records every
mount read, stat and listing answers with (:mod:`.protocol`), and the two built-in
providers, a host folder (:mod:`.folder`) and a plain value (:mod:`.value`), which the
:class:`Mount` factories build.
"""

from .folder import FolderMount, is_git_name
from .paths import (
    MAX_MOUNT_NAME_BYTES,
    MAX_MOUNT_PATH_SEGMENTS,
    MAX_MOUNT_SEGMENT_BYTES,
    MountPath,
    as_mount_path,
    validate_mount_name,
    validate_mount_segment,
)
from .protocol import (
    ACCESS_VALUES,
    DESCRIPTOR_KEYS,
    LOCALITY_VALUES,
    MAX_MOUNT_KIND_BYTES,
    Descriptor,
    Mount,
    NodeFacts,
    can_read,
    can_write,
    mount_discover,
    mount_node_record,
    mount_read,
    mount_remove,
    mount_stat,
    mount_write,
    require_read,
    require_write,
    unattached_record,
    validate_descriptor,
)
from .value import ValueMount

__all__ = [
    "ACCESS_VALUES",
    "DESCRIPTOR_KEYS",
    "LOCALITY_VALUES",
    "MAX_MOUNT_KIND_BYTES",
    "MAX_MOUNT_NAME_BYTES",
    "MAX_MOUNT_PATH_SEGMENTS",
    "MAX_MOUNT_SEGMENT_BYTES",
    "Descriptor",
    "FolderMount",
    "Mount",
    "MountPath",
    "NodeFacts",
    "ValueMount",
    "as_mount_path",
    "can_read",
    "can_write",
    "is_git_name",
    "mount_discover",
    "mount_node_record",
    "mount_read",
    "mount_remove",
    "mount_stat",
    "mount_write",
    "require_read",
    "require_write",
    "unattached_record",
    "validate_descriptor",
    "validate_mount_name",
    "validate_mount_segment",
]
