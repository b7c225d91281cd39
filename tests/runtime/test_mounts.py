"""Mount paths, the folder and value providers, descriptors and mount records."""

import os

import pytest

from svit.errors import InvalidMount, InvalidPath, InvalidValue, MountDenied, ResourceLimitExceeded
from svit.limits import Limits
from svit.mounts import (
    Mount,
    MountPath,
    mount_discover,
    mount_node_record,
    mount_read,
    mount_remove,
    mount_stat,
    mount_write,
    unattached_record,
    validate_descriptor,
    validate_mount_name,
)
from tests.conftest import make_files

P = MountPath.parse


# ---------------------------------------------------------------- MountPath


@pytest.mark.parametrize("text", ["", "/"])
def test_root_parses(text):
    assert P(text).is_root and str(P(text)) == "/"


def test_segments_parse_with_or_without_leading_slash():
    assert P("/a/b").segments == ("a", "b") == P("a/b").segments
    assert str(P("a/b")) == "/a/b"
    assert P("a/b").parent() == P("/a") and P("a").child("c") == P("a/c")


@pytest.mark.parametrize(
    "text",
    ["../secret", "a//b", "a/./b", "a\\b", "a/", "//", "..", ".", "a\x00b", "/" + "/".join(["s"] * 65), "x" * 256],
)
def test_bad_mount_paths(text):
    with pytest.raises(InvalidPath):
        P(text)


def test_mount_path_bounds_accept_the_maximum():
    assert len(P("/".join(["s"] * 64)).segments) == 64
    assert P("é" * 127).name == "é" * 127  # 254 bytes
    with pytest.raises(InvalidPath):
        P("é" * 128)  # 256 bytes
    with pytest.raises(InvalidPath):
        P(3)
    with pytest.raises(InvalidPath):
        P("/").child("..")


# ---------------------------------------------------------------- descriptors and names


def test_descriptor_validation_accepts_good_and_copies():
    good = {"access": "read", "kind": "turso-query", "locality": "remote", "source": "select 1"}
    assert validate_descriptor(good) == good and validate_descriptor(good) is not good


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        {"access": "read", "kind": "folder", "locality": "local"},
        {"access": "read", "kind": "folder", "locality": "local", "source": "/", "extra": 1},
        {"access": "all", "kind": "folder", "locality": "local", "source": "/"},
        {"access": "read", "kind": "Folder", "locality": "local", "source": "/"},
        {"access": "read", "kind": "", "locality": "local", "source": "/"},
        {"access": "read", "kind": "k" * 65, "locality": "local", "source": "/"},
        {"access": "read", "kind": "folder", "locality": "far", "source": "/"},
        {"access": "read", "kind": "folder", "locality": "local", "source": 1},
    ],
)
def test_descriptor_validation_rejects(bad):
    with pytest.raises(InvalidMount):
        validate_descriptor(bad)


def test_mount_names():
    assert validate_mount_name("files_2-x") == "files_2-x"
    for bad in ["", "not a name", "a" * 65, "a.b", "ü"]:
        with pytest.raises(InvalidMount):
            validate_mount_name(bad)


# ---------------------------------------------------------------- folder: reading (items 47, 48, 50)


def test_folder_descriptor_and_records(tmp_path):
    make_files(tmp_path)
    mount = Mount.folder(tmp_path)
    descriptor = mount.descriptor()
    assert descriptor == {"access": "read", "kind": "folder", "locality": "local", "source": os.path.realpath(tmp_path)}
    root = mount_read("files", mount, "/")
    assert root["kind"] == "directory" and root["locality"] == "local" and root["attached"] is True
    assert root["path"] == "/" and root["mount"] == "files" and root["source"] == descriptor["source"]
    assert set(root) == {"access", "attached", "facts", "kind", "locality", "mount", "path", "source"}
    assert root["facts"]["content"] == "object" and isinstance(root["facts"]["modified_unix"], int)
    assert "git" not in root["facts"]


def test_folder_read_discover_stat(tmp_path):
    make_files(tmp_path)
    mount = Mount.folder(tmp_path)
    assert mount_discover("files", mount, "/") == ["greeting.txt", "notes"]
    assert mount_discover("files", mount, "/notes") == ["checklist.md"]
    assert mount_read("files", mount, "/greeting.txt") == "hello\n"
    assert mount_read("files", mount, "/notes/checklist.md").splitlines()[1] == "just check"
    notes = mount_read("files", mount, "/notes")
    assert notes["kind"] == "directory" and notes["path"] == "/notes"
    leaf = mount_stat("files", mount, "/greeting.txt")
    assert leaf["kind"] == "leaf"
    assert leaf["facts"]["bytes"] == 6 and leaf["facts"]["content"] == "text/plain"
    assert isinstance(leaf["facts"]["modified_unix"], int)


def test_folder_absent_nodes(tmp_path):
    make_files(tmp_path)
    mount = Mount.folder(tmp_path)
    assert mount_read("files", mount, "/absent.txt") is None
    assert mount_stat("files", mount, "/absent.txt") is None
    assert mount_read("files", mount, "/greeting.txt/below") is None
    with pytest.raises(InvalidPath):
        mount_discover("files", mount, "/absent")
    with pytest.raises(InvalidPath):
        mount_discover("files", mount, "/greeting.txt")


def test_folder_refuses_escapes(tmp_path):
    make_files(tmp_path)
    mount = Mount.folder(tmp_path)
    with pytest.raises(InvalidPath):
        mount_read("files", mount, "/../../etc")
    with pytest.raises(InvalidPath):
        mount_discover("files", mount, "/..")


def test_folder_refuses_symlinks_inside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    root = tmp_path / "root"
    root.mkdir()
    (root / "file-link").symlink_to(outside / "secret.txt")
    (root / "dir-link").symlink_to(outside)
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    mount = Mount.folder(root)
    assert mount_discover("files", mount, "/") == ["dangling", "dir-link", "file-link"]
    for path in ["/file-link", "/dir-link", "/dir-link/secret.txt", "/dangling"]:
        with pytest.raises(MountDenied):
            mount_read("files", mount, path)
    with pytest.raises(MountDenied):
        mount_stat("files", mount, "/dir-link")
    with pytest.raises(MountDenied):
        mount_discover("files", mount, "/dir-link")


def test_folder_root_given_as_a_symlink_is_canonicalized(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.txt").write_text("A")
    link = tmp_path / "link"
    link.symlink_to(real)
    mount = Mount.folder(link)
    assert mount.descriptor()["source"] == os.path.realpath(real)
    assert mount_read("files", mount, "/a.txt") == "A"


def test_folder_root_swapped_for_a_symlink_is_not_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    mount = Mount.folder(real)
    real.rmdir()
    assert mount_stat("files", mount, "/")["kind"] == "missing"
    assert mount_stat("files", mount, "/")["facts"] == {}
    other = tmp_path / "other"
    other.mkdir()
    (other / "secret.txt").write_text("secret")
    real.symlink_to(other)
    # The mount holds the directory it was created for (now deleted), never the new link.
    assert mount_stat("files", mount, "/")["kind"] == "missing"
    assert mount_read("files", mount, "/secret.txt") is None
    with pytest.raises(InvalidPath):
        mount_discover("files", mount, "/")


def test_folder_needs_an_existing_directory(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidMount):
        Mount.folder(tmp_path / "f")
    with pytest.raises(InvalidMount):
        Mount.folder(tmp_path / "missing")


def test_folder_refuses_special_files(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    mount = Mount.folder(tmp_path)
    with pytest.raises(MountDenied):
        mount_read("files", mount, "/pipe")
    with pytest.raises(MountDenied):
        mount_stat("files", mount, "/pipe")


def test_folder_leaf_byte_limit(tmp_path):
    (tmp_path / "big.txt").write_text("x" * 4096)
    (tmp_path / "small.txt").write_text("x" * 2048)
    mount = Mount.folder(tmp_path)
    limits = Limits(max_text_bytes=2048)
    with pytest.raises(ResourceLimitExceeded) as info:
        mount_read("files", mount, "/big.txt", limits)
    assert info.value.limit == "mount leaf bytes"
    assert len(mount_read("files", mount, "/small.txt", limits)) == 2048


def test_folder_non_utf8_leaf_is_invalid_mount(tmp_path):
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InvalidMount):
        mount_read("files", Mount.folder(tmp_path), "/bin")


def test_folder_listing_limit(tmp_path):
    for i in range(5):
        (tmp_path / f"f{i}").write_text("")
    mount = Mount.folder(tmp_path)
    assert len(mount_discover("files", mount, "/", Limits(max_mount_entries=5))) == 5
    with pytest.raises(ResourceLimitExceeded) as info:
        mount_discover("files", mount, "/", Limits(max_mount_entries=4))
    assert info.value.limit == "mount entries"


def test_folder_non_utf8_name_is_invalid_mount(tmp_path):
    try:
        fd = os.open(os.path.join(os.fsencode(tmp_path), b"bad\xff"), os.O_CREAT | os.O_WRONLY)
    except OSError:
        pytest.skip("file system refuses non-UTF-8 names")
    os.close(fd)
    with pytest.raises(InvalidMount):
        mount_discover("files", Mount.folder(tmp_path), "/")


# ---------------------------------------------------------------- folder: git facts


def test_git_facts_on_a_branch(tmp_path):
    sha = "a" * 40
    git = tmp_path / ".git"
    (git / "refs" / "heads" / "feature").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/feature/x\n")
    (git / "refs" / "heads" / "feature" / "x").write_text(sha + "\n")
    (tmp_path / "sub").mkdir()
    mount = Mount.folder(tmp_path)
    assert mount_stat("files", mount, "/")["facts"]["git"] == {"branch": "feature/x", "commit": sha}
    assert "git" not in mount_stat("files", mount, "/sub")["facts"]


def test_git_facts_detached_and_packed(tmp_path):
    git = tmp_path / ".git"
    git.mkdir()
    (git / "HEAD").write_text("b" * 40 + "\n")
    mount = Mount.folder(tmp_path)
    assert mount_stat("files", mount, "/")["facts"]["git"] == {"branch": None, "commit": "b" * 40}
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text("# pack-refs with: peeled\n" + "c" * 40 + " refs/heads/main\n")
    assert mount_stat("files", mount, "/")["facts"]["git"] == {"branch": "main", "commit": "c" * 40}


def test_git_facts_absent_when_unresolvable_or_escaping(tmp_path):
    git = tmp_path / ".git"
    git.mkdir()
    (git / "HEAD").write_text("ref: refs/heads/../../../etc/passwd\n")
    mount = Mount.folder(tmp_path)
    assert "git" not in mount_stat("files", mount, "/")["facts"]
    (git / "HEAD").write_text("ref: refs/heads/unborn\n")
    assert "git" not in mount_stat("files", mount, "/")["facts"]


# ---------------------------------------------------------------- folder: writing (items 49, 51)


def test_read_only_folder_denies_writes(tmp_path):
    make_files(tmp_path)
    mount = Mount.folder(tmp_path)
    with pytest.raises(MountDenied):
        mount_write("files", mount, "/greeting.txt", "changed")
    with pytest.raises(MountDenied):
        mount.write(P("/greeting.txt"), "changed")
    with pytest.raises(MountDenied):
        mount_remove("files", mount, "/greeting.txt")
    assert (tmp_path / "greeting.txt").read_text() == "hello\n"


def test_writable_folder_write_and_remove(tmp_path):
    make_files(tmp_path)
    mount = Mount.writable_folder(tmp_path)
    assert mount.descriptor()["access"] == "read-write"
    mount_write("files", mount, "/greeting.txt", "changed")
    mount_write("files", mount, "/notes/new.md", "new\n")
    assert (tmp_path / "greeting.txt").read_text() == "changed"
    assert (tmp_path / "notes" / "new.md").read_text() == "new\n"
    assert sorted(os.listdir(tmp_path / "notes")) == ["checklist.md", "new.md"]  # no temp files left
    mount_remove("files", mount, "/notes/new.md")
    assert not (tmp_path / "notes" / "new.md").exists()


def test_writable_folder_write_preserves_mode(tmp_path):
    target = tmp_path / "script.sh"
    target.write_text("old")
    target.chmod(0o755)
    Mount.writable_folder(tmp_path).write(P("/script.sh"), "new")
    assert target.stat().st_mode & 0o777 == 0o755


def test_writable_folder_write_errors(tmp_path):
    make_files(tmp_path)
    mount = Mount.writable_folder(tmp_path)
    with pytest.raises(InvalidValue):
        mount.write(P("/greeting.txt"), 3)
    with pytest.raises(InvalidPath):
        mount.write(P("/"), "x")
    with pytest.raises(InvalidPath):
        mount.write(P("/missing/file.txt"), "x")
    with pytest.raises(InvalidPath):
        mount.write(P("/notes"), "x")
    with pytest.raises(ResourceLimitExceeded):
        mount.write(P("/huge.txt"), "x" * 11, Limits(max_text_bytes=10))
    assert not (tmp_path / "huge.txt").exists()


def test_writable_folder_never_writes_through_symlinks(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_text("keep")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link.txt").symlink_to(outside / "target.txt")
    (root / "dir").symlink_to(outside)
    mount = Mount.writable_folder(root)
    with pytest.raises(MountDenied):
        mount.write(P("/link.txt"), "x")
    with pytest.raises(MountDenied):
        mount.write(P("/dir/new.txt"), "x")
    with pytest.raises(MountDenied):
        mount.remove(P("/link.txt"))
    assert (outside / "target.txt").read_text() == "keep"
    assert sorted(os.listdir(outside)) == ["target.txt"]


def test_writable_folder_remove_errors(tmp_path):
    make_files(tmp_path)
    mount = Mount.writable_folder(tmp_path)
    with pytest.raises(InvalidPath):
        mount.remove(P("/notes"))
    with pytest.raises(InvalidPath):
        mount.remove(P("/absent"))
    with pytest.raises(InvalidPath):
        mount.remove(P("/"))
    assert (tmp_path / "notes" / "checklist.md").exists()


# ---------------------------------------------------------------- grants and records


class WriteOnly(Mount):
    def descriptor(self):
        return {"access": "write", "kind": "sink", "locality": "remote", "source": "sink"}

    def stat(self, path, limits=None):
        return {"facts": {}, "kind": "directory"} if path.is_root else None


def test_write_only_mount_refuses_reads_below_the_root():
    mount = WriteOnly()
    assert mount_read("sink", mount, "/")["kind"] == "directory"
    with pytest.raises(MountDenied) as info:
        mount_read("sink", mount, "/x")
    assert "write-only" in str(info.value)
    with pytest.raises(MountDenied):
        mount_discover("sink", mount, "/")
    with pytest.raises(MountDenied):
        mount_write("sink", mount, "/x", 1)  # the base provider denies writes


def test_unattached_and_missing_records():
    descriptor = {"access": "read", "kind": "folder", "locality": "local", "source": "/srv"}
    assert unattached_record("files", descriptor) == {
        "access": "read", "attached": False, "facts": {}, "kind": "folder",
        "locality": "local", "mount": "files", "path": "/", "source": "/srv",
    }
    missing = mount_node_record("files", descriptor, "/", None)
    assert missing["kind"] == "missing" and missing["attached"] is True and missing["facts"] == {}


# ---------------------------------------------------------------- value provider


def test_value_mount_reads_and_facts():
    original = {"b": [1, "two"], "a": {"s": "héllo", "n": None}}
    mount = Mount.value("config", original)
    original["a"]["s"] = "changed"  # the provider holds a private copy
    assert mount.descriptor() == {"access": "read", "kind": "value", "locality": "cache", "source": "config"}
    assert mount_stat("v", mount, "/")["facts"] == {"content": "object", "entries": 2}
    assert mount_stat("v", mount, "/b")["facts"] == {"content": "array", "entries": 2}
    assert mount_stat("v", mount, "/a/s")["facts"] == {"bytes": 6, "content": "text/plain"}
    assert mount_stat("v", mount, "/a/n")["facts"] == {"content": "scalar"}
    assert mount_stat("v", mount, "/a/s")["kind"] == "leaf"
    assert mount_read("v", mount, "/a/s") == "héllo"
    assert mount_read("v", mount, "/b/1") == "two"
    assert mount_read("v", mount, "/b/2") is None
    assert mount_read("v", mount, "/zzz") is None
    assert mount_discover("v", mount, "/") == ["a", "b"]
    assert mount_discover("v", mount, "/b") == ["0", "1"]
    with pytest.raises(InvalidPath):
        mount_read("v", mount, "/b/x")
    with pytest.raises(InvalidPath):
        mount_read("v", mount, "/a/s/deeper")
    with pytest.raises(MountDenied):
        mount_write("v", mount, "/a/s", "x")


def test_value_mount_returns_copies():
    mount = Mount.value("v", {"a": {"b": [1]}})
    leaf = mount.read(P("/a"))
    leaf["b"].append(2)
    assert mount.read(P("/a")) == {"b": [1]}


def test_writable_value_mount_writes_and_removes():
    mount = Mount.writable_value("scratch", {"m": {"k": 1}, "arr": [1, 2, 3]})
    mount_write("v", mount, "/m/k", 2)
    mount_write("v", mount, "/m/new", {"x": [True]})
    mount_write("v", mount, "/arr/0", "first")
    assert mount.read(P("/")) == {"arr": ["first", 2, 3], "m": {"k": 2, "new": {"x": [True]}}}
    with pytest.raises(InvalidPath):
        mount.write(P("/arr/3"), 4)  # no append by index
    with pytest.raises(InvalidPath):
        mount.write(P("/missing/k"), 1)
    with pytest.raises(InvalidPath):
        mount.write(P("/"), 1)
    with pytest.raises(InvalidValue):
        mount.write(P("/m/bad"), float("nan"))
    with pytest.raises(InvalidValue):
        mount.write(P("/m/bad"), {1: "x"})
    mount_remove("v", mount, "/arr/0")
    mount_remove("v", mount, "/m/k")
    assert mount.read(P("/")) == {"arr": [2, 3], "m": {"new": {"x": [True]}}}
    with pytest.raises(InvalidPath):
        mount.remove(P("/m/k"))
    with pytest.raises(InvalidPath):
        mount.remove(P("/arr/5"))


def test_value_mount_limits():
    mount = Mount.writable_value("v", {"big": "x" * 100, "list": list(range(10))})
    with pytest.raises(ResourceLimitExceeded):
        mount.read(P("/big"), Limits(max_text_bytes=50))
    with pytest.raises(ResourceLimitExceeded):
        mount.list(P("/list"), Limits(max_mount_entries=5))
    deep = [[[[1]]]]
    with pytest.raises(InvalidValue):
        mount.write(P("/big"), deep, Limits(max_value_depth=2))


def test_value_mount_rejects_non_plain_values():
    with pytest.raises(InvalidValue):
        Mount.value("v", {"x": object()})
    with pytest.raises(InvalidMount):
        Mount.value(3, {})


# ---------------------------------------------------------------- folder: git directories are never written


def _work_tree(root):
    """A folder that git treats as a work tree: .git/{HEAD,config,objects,refs,hooks}."""
    git = root / ".git"
    (git / "objects").mkdir(parents=True)
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "hooks").mkdir()
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text("d" * 40 + "\n")
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (root / "notes.txt").write_text("plain file\n")
    return git


def _git_process(root):
    from svit import Process

    return Process.builder("svit://local/mounts/git").mount("work", Mount.writable_folder(root)).build()


GIT_WRITES = [
    "/.git/config",
    "/.GIT/config",
    "/.Git/hooks/pre-commit",
    "/.git/hooks/fsmonitor-watchman",
    "/.git",
    "/sub/.git",
    "/.git.",
    "/.git ",
    "/git~1/config",
    "/.g\u200cit/config",
]


@pytest.mark.parametrize("path", GIT_WRITES)
def test_guest_writes_into_a_git_directory_are_refused(tmp_path, path):
    from svit.errors import SvitError
    from tests.bounds import unchanged

    git = _work_tree(tmp_path)
    (tmp_path / "sub").mkdir()
    before = {p: p.read_bytes() for p in git.rglob("*") if p.is_file()}
    p = _git_process(tmp_path)
    source = '(define (main input) (write input "[core]\\n\\tfsmonitor = touch /tmp/owned\\n"))'
    with unchanged(p):
        with pytest.raises(SvitError) as caught:
            p.exec_inline(source, "/mounts/work" + path)
    assert caught.value.code == "mount_denied" and "git directory" in caught.value.message
    assert {p: p.read_bytes() for p in git.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "sub" / ".git").exists()
    assert sorted(os.listdir(tmp_path)) == [".git", "notes.txt", "sub"]


@pytest.mark.parametrize("path", ["/.git/config", "/.git/HEAD", "/.GIT/refs/heads/main"])
def test_guest_removes_in_a_git_directory_are_refused(tmp_path, path):
    from svit.errors import SvitError
    from tests.bounds import unchanged

    _work_tree(tmp_path)
    p = _git_process(tmp_path)
    with unchanged(p):
        with pytest.raises(SvitError) as caught:
            p.exec_inline("(define (main input) (remove input))", "/mounts/work" + path)
    assert caught.value.code == "mount_denied"
    assert (tmp_path / ".git" / "config").exists() and (tmp_path / ".git" / "HEAD").exists()


def test_host_writes_and_provider_writes_into_git_are_refused(tmp_path):
    _work_tree(tmp_path)
    p = _git_process(tmp_path)
    with pytest.raises(MountDenied):
        p.write("/mounts/work/.git/config", "[core]\n\tfsmonitor = x\n")
    with pytest.raises(MountDenied):
        p.remove("/mounts/work/.git/config")
    mount = Mount.writable_folder(tmp_path)
    with pytest.raises(MountDenied):
        mount.write(P("/.git/config"), "x")
    with pytest.raises(MountDenied):
        mount.remove(P("/.git/HEAD"))
    assert (tmp_path / ".git" / "config").read_text().startswith("[core]\n\trepositoryformatversion")


def test_a_bare_repository_inside_the_mount_is_not_written(tmp_path):
    bare = tmp_path / "mirror"
    (bare / "objects").mkdir(parents=True)
    (bare / "refs").mkdir()
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    (bare / "config").write_text("[core]\n\tbare = true\n")
    mount = Mount.writable_folder(tmp_path)
    with pytest.raises(MountDenied, match="git directory"):
        mount.write(P("/mirror/config"), "[core]\n\tfsmonitor = x\n")
    with pytest.raises(MountDenied, match="git directory"):
        mount.write(P("/mirror/objects/x"), "x")
    with pytest.raises(MountDenied, match="git directory"):
        Mount.writable_folder(bare).write(P("/config"), "x")
    assert (bare / "config").read_text() == "[core]\n\tbare = true\n"


def test_one_activation_cannot_turn_a_directory_into_a_repository(tmp_path):
    from svit.errors import SvitError
    from tests.bounds import unchanged

    shaped = tmp_path / "shaped"
    (shaped / "objects").mkdir(parents=True)
    (shaped / "refs").mkdir()
    p = _git_process(tmp_path)
    source = """(define (main input)
      (do (write "/mounts/work/shaped/HEAD" "ref: refs/heads/main\n")
          (write "/mounts/work/shaped/config" "[core]\n\tfsmonitor = x\n")))"""
    with unchanged(p):
        with pytest.raises(SvitError, match="git directory"):
            p.exec_inline(source)
    assert sorted(os.listdir(shaped)) == ["objects", "refs"]


def test_ordinary_files_beside_a_git_directory_stay_writable(tmp_path):
    _work_tree(tmp_path)
    p = _git_process(tmp_path)
    p.exec_inline('(define (main input) (do (write "/mounts/work/notes.txt" "new") (write "/mounts/work/.gitignore" "*.tmp\\n")))')
    assert (tmp_path / "notes.txt").read_text() == "new"
    assert (tmp_path / ".gitignore").read_text() == "*.tmp\n"
    # Reading a git directory stays allowed.
    assert p.read("/mounts/work/.git/HEAD") == "ref: refs/heads/main\n"


def test_git_facts_never_run_a_command_the_folder_controls(tmp_path, monkeypatch):
    git = _work_tree(tmp_path / "repo")
    marker = tmp_path / "ran"
    hook = tmp_path / "bin" / "git"
    hook.parent.mkdir()
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    (git / "config").write_text(f"[core]\n\tfsmonitor = {hook}\n\tpager = {hook}\n")
    monkeypatch.setenv("PATH", f"{hook.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    import subprocess

    def no_subprocess(*args, **kwargs):
        raise AssertionError("the git facts reader started a process")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    monkeypatch.setattr(os, "system", no_subprocess)
    facts = mount_stat("files", Mount.folder(tmp_path / "repo"), "/")["facts"]
    assert facts["git"] == {"branch": "main", "commit": "d" * 40}
    assert not marker.exists()


# ---------------------------------------------------------------- folder: the root is held open from attach


def _fd_count():
    return len(os.listdir("/proc/self/fd"))


def _process_with(mount, name="files"):
    from svit import Process

    return Process.builder("svit://local/mounts/held").mount(name, mount).build()


def test_a_symlink_swapped_in_above_the_root_does_not_redirect_it(tmp_path):
    from tests.bounds import unchanged

    (tmp_path / "base" / "root").mkdir(parents=True)
    (tmp_path / "base" / "root" / "a.txt").write_text("mine")
    (tmp_path / "evil" / "root").mkdir(parents=True)
    (tmp_path / "evil" / "root" / "a.txt").write_text("theirs")
    (tmp_path / "evil" / "root" / "secret.txt").write_text("secret")
    p = _process_with(Mount.writable_folder(tmp_path / "base" / "root"))
    (tmp_path / "base").rename(tmp_path / "moved")
    (tmp_path / "base").symlink_to(tmp_path / "evil")
    with unchanged(p):
        assert p.read("/mounts/files/a.txt") == "mine"
        assert p.read("/mounts/files/secret.txt") is None
        assert p.discover("/mounts/files") == ["a.txt"]
    p.exec_inline('(define (main input) (write "/mounts/files/b.txt" "written"))')
    assert (tmp_path / "moved" / "root" / "b.txt").read_text() == "written"
    assert sorted(os.listdir(tmp_path / "evil" / "root")) == ["a.txt", "secret.txt"]


def test_a_root_renamed_and_replaced_keeps_the_original_directory(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("original")
    p = _process_with(Mount.folder(root))
    before = p.snapshot()
    root.rename(tmp_path / "elsewhere")
    root.mkdir()
    (root / "a.txt").write_text("replacement")
    assert p.read("/mounts/files/a.txt") == "original"
    assert p.stat("/mounts/files")["source"] == os.path.realpath(root)
    assert p.snapshot() == before


def test_a_closed_process_releases_the_root(tmp_path):
    from svit.errors import MountUnavailable

    (tmp_path / "a.txt").write_text("A")
    mount = Mount.folder(tmp_path)
    p = _process_with(mount)
    assert p.read("/mounts/files/a.txt") == "A"
    before = p.snapshot()
    p.close()
    p.close()  # closing twice is harmless
    assert p.snapshot() == before
    assert p.stat("/mounts/files")["attached"] is False
    with pytest.raises(MountUnavailable):
        p.read("/mounts/files/a.txt")
    with pytest.raises(MountUnavailable):
        mount.stat(P("/a.txt"))


def test_detach_keeps_the_descriptor_and_releases_the_provider(tmp_path):
    (tmp_path / "a.txt").write_text("A")
    p = _process_with(Mount.folder(tmp_path))
    before = p.snapshot()
    version = p.version
    p.detach_mount("files")
    assert p.snapshot() == before and p.version == version
    assert p.stat("/mounts/files")["attached"] is False
    assert p.attach_mount("files", Mount.folder(tmp_path)) is None  # same descriptor: no commit
    assert p.read("/mounts/files/a.txt") == "A"
    with pytest.raises(InvalidPath):
        p.detach_mount("absent")


def test_a_provider_shared_with_a_fork_stays_open_until_both_let_go(tmp_path):
    (tmp_path / "a.txt").write_text("A")
    mount = Mount.folder(tmp_path)
    parent = _process_with(mount)
    child = parent.fork("svit://local/mounts/child")
    parent.close()
    assert child.read("/mounts/files/a.txt") == "A"
    child.close()
    from svit.errors import MountUnavailable

    with pytest.raises(MountUnavailable):
        mount.read(P("/a.txt"))


def test_a_released_provider_reattaches_only_to_the_same_directory(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("A")
    mount = Mount.folder(root)
    first = _process_with(mount)
    first.close()
    second = _process_with(mount)
    assert second.read("/mounts/files/a.txt") == "A"
    second.close()
    root.rename(tmp_path / "gone")
    root.mkdir()
    with pytest.raises(InvalidMount, match="no longer"):
        _process_with(mount)


def test_many_attaches_do_not_leak_descriptors(tmp_path):
    import gc

    (tmp_path / "a.txt").write_text("A")
    for _ in range(5):  # warm up anything opened once
        _process_with(Mount.folder(tmp_path)).close()
    gc.collect()
    start = _fd_count()
    for _ in range(300):
        p = _process_with(Mount.folder(tmp_path))
        p.read("/mounts/files/a.txt")
        p.close()
    for _ in range(300):  # dropped without close: the provider closes when collected
        _process_with(Mount.folder(tmp_path)).read("/mounts/files/a.txt")
    shared = Mount.writable_folder(tmp_path)
    p = _process_with(shared)
    for i in range(300):  # re-attaching and replacing under one name
        p.attach_mount("files", shared if i % 2 else Mount.writable_folder(tmp_path))
    p.close()
    gc.collect()
    assert _fd_count() <= start + 2
