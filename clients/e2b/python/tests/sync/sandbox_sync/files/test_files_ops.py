"""Upstream's test_exists.py, test_make_dir.py, test_remove.py,
test_rename.py and test_read.py, one test each (names kept)."""

import uuid

import pytest

from e2b import FileNotFoundException, NotFoundException, Sandbox
from envd_support import home


def test_exists(sandbox: Sandbox):
    sandbox.files.write("test_exists.txt", "test")
    assert sandbox.files.exists("test_exists.txt")


def test_make_directory(sandbox: Sandbox):
    name = f"test_directory_{uuid.uuid4()}"
    sandbox.files.make_dir(name)
    assert sandbox.files.exists(name)


def test_make_directory_already_exists(sandbox: Sandbox):
    name = f"test_directory_{uuid.uuid4()}"
    assert sandbox.files.make_dir(name)
    assert not sandbox.files.make_dir(name)


def test_make_nested_directory(sandbox: Sandbox):
    name = f"test_directory_{uuid.uuid4()}/nested_directory"
    sandbox.files.make_dir(name)
    assert sandbox.files.exists(name)


def test_remove_file(sandbox: Sandbox):
    sandbox.files.write("test_remove.txt", "This file will be removed.")
    sandbox.files.remove("test_remove.txt")
    assert not sandbox.files.exists("test_remove.txt")


def test_remove_non_existing_file(sandbox):
    sandbox.files.remove("non_existing_file.txt")


def test_rename_file(sandbox: Sandbox):
    content = "This file will be renamed."
    sandbox.files.write("test_rename_old.txt", content)
    info = sandbox.files.rename("test_rename_old.txt", "test_rename_new.txt")
    assert info.path == f"{home(sandbox)}/test_rename_new.txt"
    assert not sandbox.files.exists("test_rename_old.txt")
    assert sandbox.files.exists("test_rename_new.txt")
    assert sandbox.files.read("test_rename_new.txt") == content


def test_rename_non_existing_file(sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.rename("non_existing_file.txt", "new_non_existing_file.txt")


def test_read_file(sandbox):
    sandbox.files.write("test_read.txt", "Hello, world!")
    assert sandbox.files.read("test_read.txt") == "Hello, world!"


def test_read_non_existing_file(sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("non_existing_file.txt")


def test_read_non_existing_file_catches_with_deprecated_not_found_exception(sandbox):
    with pytest.raises(NotFoundException):
        sandbox.files.read("non_existing_file.txt")


def test_read_empty_file(sandbox):
    sandbox.commands.run("touch empty_file.txt")
    assert sandbox.files.read("empty_file.txt") == ""


STREAMED = "Streamed read content. " * 10_000


def test_read_file_as_stream(sandbox):
    sandbox.files.write("test_read_stream.txt", STREAMED)
    stream = sandbox.files.read("test_read_stream.txt", format="stream")
    assert b"".join(stream).decode("utf-8") == STREAMED


def test_read_file_as_stream_with_gzip(sandbox):
    content = "Streamed gzipped read content. " * 10_000
    sandbox.files.write("test_read_stream_gzip.txt", content)
    stream = sandbox.files.read("test_read_stream_gzip.txt", format="stream", gzip=True)
    assert b"".join(stream).decode("utf-8") == content


def test_read_non_existing_file_as_stream(sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("non_existing_file.txt", format="stream")


def test_read_file_as_stream_context_manager(sandbox):
    sandbox.files.write("test_read_stream_ctx.txt", STREAMED)
    with sandbox.files.read("test_read_stream_ctx.txt", format="stream") as stream:
        assert b"".join(stream).decode("utf-8") == STREAMED


def test_read_file_as_stream_partial_then_close(sandbox):
    sandbox.files.write("test_read_stream_partial.txt", STREAMED)
    stream = sandbox.files.read("test_read_stream_partial.txt", format="stream")
    first = next(iter(stream))  # the first chunk only, then close
    assert len(first) > 0
    stream.close()
