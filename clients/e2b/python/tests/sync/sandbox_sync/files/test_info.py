import pytest

from e2b import FileType, Sandbox
from e2b.exceptions import FileNotFoundException
from envd_support import home


def test_get_info_of_file(sandbox: Sandbox):
    sandbox.files.write("test_file.txt", "test")
    info = sandbox.files.get_info("test_file.txt")
    assert info.name == "test_file.txt"
    assert info.type == FileType.FILE
    assert info.path == f"{home(sandbox)}/test_file.txt"
    assert info.size == 4
    assert info.mode == 0o644
    assert info.permissions == "-rw-r--r--"
    assert info.modified_time is not None
    assert info.modified_time.tzinfo is not None
    assert info.owner == "user"
    assert info.group == "user"


def test_get_info_of_nonexistent_file(sandbox: Sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.get_info("test_does_not_exist.txt")


def test_get_info_of_directory(sandbox: Sandbox):
    sandbox.files.make_dir("test_dir")
    info = sandbox.files.get_info("test_dir")
    assert info.name == "test_dir"
    assert info.type == FileType.DIR
    assert info.path == f"{home(sandbox)}/test_dir"
    assert info.size > 0
    assert info.mode == 0o755
    assert info.permissions == "drwxr-xr-x"
    assert info.modified_time is not None
    assert info.modified_time.tzinfo is not None
    assert info.owner == "user"
    assert info.group == "user"


def test_get_info_of_nonexistent_directory(sandbox: Sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.get_info("test_does_not_exist_dir")


def test_file_symlink(sandbox: Sandbox):
    sandbox.files.make_dir("test-simlink-entry")
    sandbox.files.write("test-simlink-entry/test.txt", "Hello, World!")
    sandbox.commands.run("ln -s test.txt symlink_to_test.txt", cwd="test-simlink-entry")
    f = sandbox.files.get_info("test-simlink-entry/symlink_to_test.txt")
    assert f.type == FileType.FILE
    assert f.symlink_target == f"{home(sandbox)}/test-simlink-entry/test.txt"
    sandbox.files.remove("test-simlink-entry")
