import io
import uuid

from e2b.sandbox.filesystem.filesystem import FileType, WriteEntry, WriteInfo
from envd_support import home


def test_write_text_file(sandbox, debug):
    info = sandbox.files.write("test_write.txt", "This is a test file.")
    assert info.path == f"{home(sandbox)}/test_write.txt"
    assert info.type == FileType.FILE
    assert sandbox.files.exists("test_write.txt")
    assert sandbox.files.read("test_write.txt") == "This is a test file."


def test_write_binary_file(sandbox, debug):
    text = "This is a test binary file."
    info = sandbox.files.write("test_write.bin", io.BytesIO(text.encode("utf-8")))
    assert info.path == f"{home(sandbox)}/test_write.bin"
    assert sandbox.files.exists("test_write.bin")
    assert sandbox.files.read("test_write.bin") == text


def test_write_multiple_files(sandbox, debug):
    h = home(sandbox)
    assert isinstance(sandbox.files.write_files([]), list)
    assert sandbox.files.write_files([]) == []
    one = sandbox.files.write_files([WriteEntry(path="one_test_file.txt", data="This is a test file.")])
    assert isinstance(one, list) and len(one) == 1
    assert isinstance(one[0], WriteInfo)
    assert one[0].path == f"{h}/one_test_file.txt"
    assert sandbox.files.exists(one[0].path)
    assert sandbox.files.read(one[0].path) == "This is a test file."
    files = [WriteEntry(path=f"test_write_{i}.txt", data=f"This is a test file {i}.") for i in range(10)]
    infos = sandbox.files.write_files(files)
    assert isinstance(infos, list)
    assert len(infos) == len(files)
    for i, info in enumerate(infos):
        assert isinstance(info, WriteInfo)
        assert info.path == f"{h}/test_write_{i}.txt"
        assert info.type == FileType.FILE
        assert sandbox.files.exists(files[i]["path"])
        assert sandbox.files.read(info.path) == files[i]["data"]


def test_overwrite_file(sandbox, debug):
    sandbox.files.write("test_overwrite.txt", "Initial content.")
    sandbox.files.write("test_overwrite.txt", "New content.")
    assert sandbox.files.read("test_overwrite.txt") == "New content."


def test_write_to_non_existing_directory(sandbox, debug):
    name = "non_existing_dir/test_write.txt"
    sandbox.files.write(name, "This should succeed too.")
    assert sandbox.files.exists(name)
    assert sandbox.files.read(name) == "This should succeed too."


def test_write_with_secured_envd(sandbox_factory):
    name = f"non_existing_dir_{uuid.uuid4()}/test_write.txt"
    sbx = sandbox_factory(timeout=30, secure=True)
    assert sbx.is_running()
    assert sbx._envd_version is not None
    assert sbx._envd_access_token is not None
    sbx.files.write(name, "This should succeed too.")
    assert sbx.files.exists(name)
    assert sbx.files.read(name) == "This should succeed too."


def test_write_files_with_different_data_types(sandbox, debug):
    files = [
        WriteEntry(path="writefiles_text.txt", data="Text string data"),
        WriteEntry(path="writefiles_bytes.bin", data=b"Bytes data"),
        WriteEntry(path="writefiles_bytesio.bin", data=io.BytesIO(b"BytesIO data")),
        WriteEntry(path="writefiles_stringio.txt", data=io.StringIO("StringIO data")),
    ]
    assert len(sandbox.files.write_files(files)) == 4
    assert sandbox.files.read("writefiles_text.txt") == "Text string data"
    assert sandbox.files.read("writefiles_bytes.bin") == "Bytes data"
    assert sandbox.files.read("writefiles_bytesio.bin") == "BytesIO data"
    assert sandbox.files.read("writefiles_stringio.txt") == "StringIO data"


def test_write_io_with_octet_stream(sandbox, debug):
    text = "Streamed octet-stream upload. " * 10_000
    info = sandbox.files.write("test_write_octet_io.bin", io.BytesIO(text.encode()), use_octet_stream=True)
    assert info.path == f"{home(sandbox)}/test_write_octet_io.bin"
    assert sandbox.files.read("test_write_octet_io.bin") == text


def test_write_text_io_with_octet_stream(sandbox, debug):
    text = "Streamed text octet-stream upload."
    sandbox.files.write("test_write_octet_text_io.txt", io.StringIO(text), use_octet_stream=True)
    assert sandbox.files.read("test_write_octet_text_io.txt") == text


def test_write_io_with_octet_stream_and_gzip(sandbox, debug):
    text = "Streamed gzipped octet-stream upload. " * 10_000
    sandbox.files.write("test_write_octet_io_gzip.bin", io.BytesIO(text.encode()), use_octet_stream=True, gzip=True)
    assert sandbox.files.read("test_write_octet_io_gzip.bin") == text
