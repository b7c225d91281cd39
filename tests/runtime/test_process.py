"""Process invariants: commit or nothing, snapshots, restore, fork, host operations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit import Limits, Mount, Ports, Process
from svit.errors import SvitError
from tests.conftest import with_trailer as _reseal

ADDRESS = "svit://local/t/p"
README = Path(__file__).resolve().parents[2] / "README.md"


def counter_process(**limits: int) -> Process:
    source = """
    (define (main input)
      (let ((next (+ (read "/memory/count") (value-get input "/by"))))
        (do (write "/memory/count" next)
            (log-info! "counted" (value-map "count" next))
            (value-map "count" next "missing-is-null" (value-null? (read "/memory/missing"))))))
    """
    return Process.builder(ADDRESS).memory("count", 0).library("counter", source).limits(Limits(**limits)).build()


def test_readme_python_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has a Python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["p"].read("/memory/count") == 3


def test_counter_activation_commits_one_version() -> None:
    p = counter_process()
    a = p.exec("/lib/counter", {"by": 2})
    assert a.output == {"count": 2, "missing-is-null": True}
    assert a.version == 1 and p.version == 1
    assert a.changed == ["/memory/count"]
    assert a.logs == [{"message": "counted", "fields": {"count": 2}}]
    assert a.root_hash == p.root_hash == p.node_hash("/")


def test_failed_activation_leaves_snapshot_bytes_identical() -> None:
    p = Process.builder(ADDRESS).memory("balance", 10).library(
        "pay",
        """(define (main input)
             (do (write "/memory/balance" 0)
                 (send! "svit://local/t/merchant" (value-map "amount" 10))
                 (write "/lib/helper" (value-map "source" "(define (main x) x)"))
                 (panic "declined")))""",
    ).build()
    before = p.snapshot()
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/pay", None)
    assert caught.value.code == "script_failed" and "declined" in caught.value.message
    assert p.snapshot() == before
    assert p.version == 0 and p.read("/memory/balance") == 10 and p.outbox() == []


def test_restored_twice_gives_identical_results() -> None:
    p = counter_process()
    p.exec("/lib/counter", {"by": 5})
    blob = p.snapshot()
    first, second = Process.restore(blob), Process.restore(blob)
    a, b = first.exec("/lib/counter", {"by": 1}), second.exec("/lib/counter", {"by": 1})
    assert (a.output, a.logs, a.messages, a.root_hash) == (b.output, b.logs, b.messages, b.root_hash)
    assert first.snapshot() == second.snapshot()


def test_snapshot_truncated_at_every_offset_is_rejected() -> None:
    blob = counter_process().snapshot()
    for cut in range(len(blob)):
        with pytest.raises(SvitError) as caught:
            Process.restore(blob[:cut])
        assert caught.value.code == "invalid_snapshot"


def test_snapshot_single_bit_flips_are_rejected() -> None:
    blob = counter_process().snapshot()
    step = max(1, len(blob) * 8 // 3000)
    for bit in range(0, len(blob) * 8, step):
        damaged = bytearray(blob)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(SvitError) as caught:
            Process.restore(bytes(damaged))
        assert caught.value.code == "invalid_snapshot"


def _reencode(p: Process, mutate) -> bytes:
    """Tamper with a snapshot's content and re-seal it consistently (hash and trailer)."""
    from svit import tree
    from svit.snapshot import decode_snapshot, encode_snapshot

    address, version, root, limits = decode_snapshot(p.snapshot())
    plain = root.to_value()
    address = mutate(plain) or address
    return encode_snapshot(address, version, tree.from_value(plain, scripts_allowed=True), limits)


def test_forged_identity_is_rejected_by_schema_validation() -> None:
    p = counter_process()

    def forge(plain):
        plain["system"]["identity"]["address"] = "svit://local/t/evil"

    with pytest.raises(SvitError) as caught:
        Process.restore(_reencode(p, forge))
    assert "/system/identity" in caught.value.message


def test_reserved_tasks_must_stay_empty_on_restore() -> None:
    def forge(plain):
        plain["tasks"]["x"] = 1

    with pytest.raises(SvitError) as caught:
        Process.restore(_reencode(counter_process(), forge))
    assert "/tasks is reserved" in caught.value.message


def test_restore_refuses_limits_above_hard_maxima() -> None:
    import cbor2

    from svit.snapshot import TRAILER_BYTES

    blob = counter_process().snapshot()
    body = cbor2.loads(blob[:-TRAILER_BYTES])
    assert Process.restore(_reseal(cbor2.dumps(body))).version == 0  # control: re-sealing alone is accepted
    for field, value in (("max_exec_depth", 65), ("max_value_depth", 10_000)):
        forged = {**body, "limits": {**body["limits"], field: value}}
        with pytest.raises(SvitError) as caught:
            Process.restore(_reseal(cbor2.dumps(forged)))
        assert caught.value.code == "invalid_limits", field


def test_hashes_are_structural() -> None:
    p = Process.builder(ADDRESS).memory("profile", {"name": "Ada"}).memory("scores", [3, 5]).build()
    scores = p.node_hash("/memory/scores")
    profile = p.node_hash("/memory/profile")
    change = p.write("/memory/profile/name", "Grace")
    assert p.node_hash("/memory/scores") == scores
    assert p.node_hash("/memory/profile") != profile
    other = Process.builder("svit://local/t/other").memory("x", {"name": "Grace"}).build()
    assert p.node_hash("/memory/profile") == other.node_hash("/memory/x")
    assert p.root_hash == p.node_hash("/") == change.hash("/")
    assert set(change.hashes) == {"/", "/memory", "/memory/profile", "/memory/profile/name"}
    assert change.touches("/memory/profile") and change.touches("/") and change.touches("/memory/profile/name")
    assert not change.touches("/memory/profile/age") and not change.touches("/lib") and not change.touches("/mounts")
    removed = p.remove("/memory/profile/name")
    assert removed.hash("/memory/profile/name") is None


def test_fork_clears_outbox_and_evolves_independently() -> None:
    p = Process.builder(ADDRESS).memory("n", 1).library(
        "send", '(define (main input) (do (send! "svit://local/t/other" input) true))'
    ).build()
    p.exec("/lib/send", {"hello": 1})
    child = p.fork("svit://local/t/child")
    assert child.outbox() == [] and len(p.outbox()) == 1
    assert child.version == p.version
    assert child.read("/system/lineage/parent") == ADDRESS and p.read("/system/lineage/parent") is None
    child.write("/memory/n", 2)
    assert p.read("/memory/n") == 1 and child.read("/memory/n") == 2


def test_ports_run_in_place_once_even_when_the_activation_fails() -> None:
    calls = []

    def echo(value):
        calls.append(value)
        return {"echo": value}

    p = (
        Process.builder(ADDRESS)
        .memory("seen", None)
        .library("use", '(define (main input) (do (write "/memory/seen" (port-call "echo" input)) (if (value-get input "/fail") (panic "late") true)))')
        .ports(Ports().port("echo", echo))
        .build()
    )
    assert p.read("/ports/echo")["name"] == "echo"
    before = p.snapshot()
    with pytest.raises(SvitError):
        p.exec("/lib/use", {"fail": True})
    assert len(calls) == 1 and p.snapshot() == before
    assert p.exec("/lib/use", {"fail": False}).output is True
    assert p.read("/memory/seen") == {"echo": {"fail": False}} and len(calls) == 2


def test_port_failure_text_and_bare_process() -> None:
    def broken(value):
        raise RuntimeError("upstream said no")

    p = Process.builder(ADDRESS).library("use", '(define (main input) (port-call "x" input))').ports(Ports().port("x", broken)).build()
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/use", 1)
    # An arbitrary exception shows the script only its kind; its text stays with the host.
    assert "port /ports/x failed: RuntimeError" in caught.value.message
    assert "upstream said no" not in caught.value.message
    bare = Process.builder(ADDRESS).library("use", '(define (main input) (port-call "x" input))').build()
    with pytest.raises(SvitError) as caught:
        bare.exec("/lib/use", 1)
    assert "Svit Lisp port calls require a Svit host" in caught.value.message


def test_port_call_limit() -> None:
    p = (
        Process.builder(ADDRESS)
        .library("many", '(define (loop n) (if (= n 0) true (do (port-call "p" n) (loop (- n 1))))) (define (main input) (loop input))')
        .ports(Ports().port("p", lambda v: v))
        .limits(Limits(max_port_calls=2))
        .build()
    )
    assert p.exec("/lib/many", 2).output is True
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/many", 3)
    assert caught.value.code == "resource_limit_exceeded" and caught.value.limit == "port calls"


def test_port_output_is_charged_to_guest_memory() -> None:
    # A port's output enters Lisp like any other value the guest holds: over the guest
    # memory limit the activation fails, the port's effect stands, and nothing commits.
    calls = []

    def big(value):
        calls.append(value)
        return {"rows": ["x" * 1000] * value}

    p = (
        Process.builder(ADDRESS)
        .memory("n", 0)
        .library("use", '(define (main input) (do (write "/memory/n" input) (value-get (port-call "big" input) "/rows/0")))')
        .ports(Ports().port("big", big))
        .limits(Limits(max_guest_memory=64 * 1024))
        .build()
    )
    assert p.exec("/lib/use", 10).output == "x" * 1000
    before = p.snapshot()
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/use", 100)
    assert caught.value.code == "resource_limit_exceeded" and caught.value.limit == "guest memory"
    assert calls == [10, 100] and p.snapshot() == before


def test_folder_mount_is_descriptor_only_and_restores_unattached(tmp_path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "greeting.txt").write_text("hello")
    (tmp_path / "notes" / "checklist.md").write_text("first\njust check\n")
    p = Process.builder(ADDRESS).mount("files", Mount.folder(tmp_path)).library(
        "look",
        """(define (main input)
             (value-map "children" (discover "/mounts/files")
                        "text" (read "/mounts/files/greeting.txt")
                        "kind" (value-get (stat "/mounts/files/notes") "/kind")
                        "locality" (value-get (stat "/mounts/files") "/locality")
                        "found" (search "/mounts/files" "just check")))""",
    ).build()
    out = p.exec("/lib/look", None).output
    assert out["children"] == ["greeting.txt", "notes"] and out["text"] == "hello"
    assert out["kind"] == "directory" and out["locality"] == "local"
    assert out["found"]["matches"][0]["path"] == "/mounts/files/notes/checklist.md" and out["found"]["matches"][0]["line"] == 2
    assert p.read("/mounts") == {"files": {"access": "read", "kind": "folder", "locality": "local", "source": str(tmp_path.resolve())}}
    blob = p.snapshot()
    assert b"hello" not in blob
    with pytest.raises(SvitError) as caught:
        p.write("/mounts/files/greeting.txt", "changed")
    assert caught.value.code == "mount_denied" and (tmp_path / "greeting.txt").read_text() == "hello"
    restored = Process.restore(blob)
    assert restored.read("/mounts/files")["attached"] is False
    with pytest.raises(SvitError) as caught:
        restored.read("/mounts/files/greeting.txt")
    assert caught.value.code == "mount_unavailable"
    version = restored.version
    assert restored.attach_mount("files", Mount.folder(tmp_path)) is None
    assert restored.version == version and restored.read("/mounts/files/greeting.txt") == "hello"


def test_writable_mount_writes_only_on_commit(tmp_path) -> None:
    (tmp_path / "out.txt").write_text("old")
    p = Process.builder(ADDRESS).memory("n", 0).mount("files", Mount.writable_folder(tmp_path)).library(
        "w",
        '(define (main input) (do (write "/mounts/files/out.txt" "new") (write "/memory/n" 1) (if input (panic "no") true)))',
    ).build()
    with pytest.raises(SvitError):
        p.exec("/lib/w", True)
    assert (tmp_path / "out.txt").read_text() == "old" and p.version == 0
    a = p.exec("/lib/w", False)
    assert (tmp_path / "out.txt").read_text() == "new" and p.version == 1
    assert a.changed == ["/memory/n", "/mounts/files/out.txt"]


def test_mount_name_errors() -> None:
    p = Process.builder(ADDRESS).build()
    with pytest.raises(SvitError) as caught:
        p.read("/mounts/absent/thing")
    assert caught.value.code == "invalid_path"
    with pytest.raises(SvitError) as caught:
        p.read("/mounts/not a name/thing")
    assert caught.value.code == "invalid_mount"


# ---------------------------------------------------------------------------
# Random host operation sequences keep every invariant.

paths = st.sampled_from(["/memory/a", "/memory/b", "/memory/a/x", "/memory/list", "/memory/list/0", "/memory/list/5",
                         "/memory", "/lib/s", "/lib/bad name", "/system/x", "/thread", "/inbox", "/memory/deep/er"])
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=5), children, max_size=4)),
    max_leaves=12,
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("write"), paths, values),
        st.tuples(st.just("remove"), paths, st.none()),
        st.tuples(st.just("lib"), st.sampled_from(["(define (main input) input)", "(define (main input", "(define (main input) (write \"/memory/a\" input))"]), st.none()),
        st.tuples(st.just("exec"), st.sampled_from(["/lib/s", "/lib/missing", "/memory/a"]), values),
        st.tuples(st.just("inbox"), values, st.none()),
        st.tuples(st.just("ack"), values, st.none()),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(operations)
def test_random_host_operations_keep_invariants(ops) -> None:
    p = Process.builder(ADDRESS).memory("list", [1, 2]).limits(Limits(max_value_entries=64, max_text_bytes=512)).build()
    for op, a, b in ops:
        before = (p.version, p.root_hash, p.snapshot())
        try:
            if op == "write":
                p.write(a, b)
            elif op == "remove":
                p.remove(a)
            elif op == "lib":
                p.write("/lib/s", {"source": a})
            elif op == "exec":
                p.exec(a, b)
            elif op == "inbox":
                p.enqueue_inbox(a)
            else:
                p.acknowledge_inbox(a)
        except SvitError:
            assert (p.version, p.root_hash, p.snapshot()) == before
        else:
            assert p.version == before[0] + 1
        assert p.root_hash == p.node_hash("/")
    restored = Process.restore(p.snapshot())
    assert restored.root_hash == p.root_hash and restored.version == p.version


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_mutated_snapshot_bytes_never_crash(data) -> None:
    blob = bytearray(counter_process().snapshot())
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(blob) - 1))
        blob[index] = data.draw(st.integers(0, 255))
    try:
        restored = Process.restore(bytes(blob))
    except SvitError as error:
        assert error.code in ("invalid_snapshot", "invalid_limits", "invalid_value")
    else:
        assert restored.root_hash == restored.node_hash("/")


def test_hooks_rewrite_cancel_and_observe_and_a_failing_observer_changes_nothing() -> None:
    from svit import ActivationRequest, Cancel

    events = []

    class Doubler:
        def before_activation(self, request):
            if request.input == "stop":
                return Cancel("not today")
            return ActivationRequest(request.script, {"by": request.input["by"] * 2})

        def after_activation(self, event):
            events.append((event.status, event.version))

    class Broken:
        def after_activation(self, event):
            raise RuntimeError("observer fell over")

    source = '(define (main input) (do (write "/memory/n" (value-get input "/by")) (read "/memory/n")))'
    p = Process.builder(ADDRESS).memory("n", 0).library("s", source).hook(Doubler()).hook(Broken()).build()
    assert p.exec("/lib/s", {"by": 2}).output == 4  # rewritten by the hook; the broken observer is reported, not raised
    assert events == [("committed", 1)] and p.version == 1
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/s", "stop")
    assert caught.value.code == "hook_cancelled" and "not today" in caught.value.message
    assert p.version == 1
