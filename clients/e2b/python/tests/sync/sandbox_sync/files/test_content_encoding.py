from e2b.sandbox.filesystem.filesystem import WriteEntry
from envd_support import home


def test_write_and_read_with_gzip(sandbox, debug):
    content = "This is a test file with gzip encoding."
    info = sandbox.files.write("test_gzip_write.txt", content, gzip=True)
    assert info.path == f"{home(sandbox)}/test_gzip_write.txt"
    assert sandbox.files.read("test_gzip_write.txt", gzip=True) == content


def test_write_gzip_read_plain(sandbox, debug):
    content = "Written with gzip, read without."
    sandbox.files.write("test_gzip_write_plain_read.txt", content, gzip=True)
    assert sandbox.files.read("test_gzip_write_plain_read.txt") == content


def test_write_files_with_gzip(sandbox, debug):
    files = [WriteEntry(path=f"gzip_multi_{i}.txt", data=f"File {i} content") for i in (1, 2, 3)]
    infos = sandbox.files.write_files(files, gzip=True)
    assert len(infos) == len(files)
    for f in files:
        assert sandbox.files.read(f["path"]) == f["data"]


def test_read_bytes_with_gzip(sandbox, debug):
    content = "Binary content with gzip."
    sandbox.files.write("test_gzip_bytes.txt", content)
    data = sandbox.files.read("test_gzip_bytes.txt", format="bytes", gzip=True)
    assert isinstance(data, bytearray)
    assert data.decode("utf-8") == content
