"""The commit path: a failed transition changes nothing, the handle included; a change hashes what it committed."""

from __future__ import annotations

import pytest

from svit import Limits, Ports, Process
from svit.errors import SvitError


def test_failed_replace_ports_keeps_the_old_registry_attached():
    old = Ports().port("echo", lambda x: x)
    p = Process.builder("svit://local/review/ports").limits(Limits(max_value_entries=12)).ports(old).build()
    # A catalog too large for /ports (max_value_entries) fails root validation.
    big = Ports().port("echo", lambda x: x).port("other", lambda x: x)
    version, root = p.version, p.root_hash
    with pytest.raises(SvitError):
        p.replace_ports(big)
    assert (p.version, p.root_hash) == (version, root)
    assert p.ports is old  # the handle still calls the ports its /ports catalog describes


def test_attach_mount_change_hashes_its_committed_ancestors(tmp_path):
    from svit import Mount

    p = Process.builder("svit://local/review/mount").build()
    change = p.attach_mount("files", Mount.folder(str(tmp_path)))
    assert change.version == 1 and change.paths == ["/mounts/files"]
    # The root and /mounts changed; the mount path itself carries no hash (reference §5.4).
    assert change.hashes == {"/": p.root_hash, "/mounts": p.node_hash("/mounts")}
    assert "/mounts/files" not in change.hashes
