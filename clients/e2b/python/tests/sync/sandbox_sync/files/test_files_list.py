import uuid

from e2b import FileType, Sandbox
from envd_support import home

D, F = FileType.DIR, FileType.FILE


def test_list_directory(sandbox: Sandbox):
    h = home(sandbox)
    parent = f"test_directory_{uuid.uuid4()}"
    for d in ["", "/subdir1", "/subdir2", "/subdir1/subdir1_1", "/subdir1/subdir1_2", "/subdir2/subdir2_1", "/subdir2/subdir2_2"]:
        sandbox.files.make_dir(parent + d)
    sandbox.files.write(f"{parent}/file1.txt", "Hello, world!")
    top = [("file1.txt", F, "file1.txt"), ("subdir1", D, "subdir1"), ("subdir2", D, "subdir2")]
    deep = [
        ("file1.txt", F, "file1.txt"),
        ("subdir1", D, "subdir1"),
        ("subdir1_1", D, "subdir1/subdir1_1"),
        ("subdir1_2", D, "subdir1/subdir1_2"),
        ("subdir2", D, "subdir2"),
        ("subdir2_1", D, "subdir2/subdir2_1"),
        ("subdir2_2", D, "subdir2/subdir2_2"),
    ]
    # default depth (1), explicit 1, 2, and 3 (the same as 2).
    for depth, want in [(None, top), (1, top), (2, deep), (3, deep)]:
        files = sandbox.files.list(parent, depth=depth)
        assert len(files) == len(want), depth
        for f, (name, kind, rel) in zip(files, want):
            assert f.name == name
            assert f.path == f"{h}/{parent}/{rel}"
            assert f.type == kind
    sandbox.files.remove(parent)


def test_list_directory_error_cases(sandbox: Sandbox):
    parent = f"test_directory_{uuid.uuid4()}"
    sandbox.files.make_dir(parent)
    try:
        sandbox.files.list(parent, depth=-1)
        assert False, "Expected error but none was thrown"
    except Exception as err:
        assert "depth should be at least 1" in str(err)
    sandbox.files.remove(parent)


def test_file_entry_details(sandbox: Sandbox):
    sandbox.files.make_dir("test-file-entry")
    sandbox.files.write("test-file-entry/test.txt", "Hello, World!")
    files = sandbox.files.list("test-file-entry", depth=1)
    assert len(files) == 1
    e = files[0]
    assert e.name == "test.txt"
    assert e.path == f"{home(sandbox)}/test-file-entry/test.txt"
    assert e.mode == 0o644
    assert e.permissions == "-rw-r--r--"
    assert e.size == len("Hello, World!")
    assert e.modified_time is not None
    assert e.symlink_target is None
    sandbox.files.remove("test-file-entry")
    assert e.owner == "user"
    assert e.group == "user"


def test_directory_entry_details(sandbox: Sandbox):
    sandbox.files.make_dir("test-entry-info")
    sandbox.files.make_dir("test-entry-info/subdir")
    files = sandbox.files.list("test-entry-info", depth=1)
    assert len(files) == 1
    e = files[0]
    assert e.name == "subdir"
    assert e.path == f"{home(sandbox)}/test-entry-info/subdir"
    assert e.mode == 0o755
    assert e.permissions == "drwxr-xr-x"
    assert e.modified_time is not None
    sandbox.files.remove("test-entry-info")
    assert e.owner == "user"
    assert e.group == "user"


def test_mixed_entries(sandbox: Sandbox):
    h = home(sandbox)
    sandbox.files.make_dir("test-mixed-entries")
    sandbox.files.make_dir("test-mixed-entries/subdir")
    sandbox.files.write("test-mixed-entries/test.txt", "Hello, World!")
    files = sandbox.files.list("test-mixed-entries", depth=1)
    assert len(files) == 2
    entries = {e.name: e for e in files}
    d = entries.get("subdir")
    assert d is not None
    assert d.path == f"{h}/test-mixed-entries/subdir"
    assert d.mode == 0o755
    assert d.permissions == "drwxr-xr-x"
    assert d.modified_time is not None
    f = entries.get("test.txt")
    assert f is not None
    assert f.path == f"{h}/test-mixed-entries/test.txt"
    assert f.mode == 0o644
    assert f.permissions == "-rw-r--r--"
    assert f.size == len("Hello, World!")
    assert f.modified_time is not None
    sandbox.files.remove("test-mixed-entries")
    assert (d.owner, d.group, f.owner, f.group) == ("user", "user", "user", "user")
