"""Both object stores behave alike: local directories and GCS (the real fake-gcs-server)."""

import os

import pytest

from seedrl.common.files import TEMPORARY_MARK, replace_file, temporary_path
from seedrl.common.storage import (
    GCSStore,
    LocalStore,
    NotFound,
    PreconditionFailed,
    TransientStorageError,
    open_store,
    with_retries,
)


@pytest.fixture(params=["local", "gcs"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(str(tmp_path / "store"))
    bucket = request.getfixturevalue("gcs_bucket")
    return open_store(f"gs://{bucket}/experiments/e1")


def test_write_read_list_delete(store, tmp_path):
    with pytest.raises(NotFound):
        store.read("a/b.json")
    g1 = store.write("a/b.json", b"one")
    data, g = store.read("a/b.json")
    assert (data, g) == (b"one", g1)
    src = tmp_path / "big.bin"
    src.write_bytes(bytes(range(256)) * 4096)
    store.upload_file("a/c/big.bin", str(src))
    dst = tmp_path / "copy.bin"
    store.download_file("a/c/big.bin", str(dst))
    assert dst.read_bytes() == src.read_bytes()
    assert store.list() == ["a/b.json", "a/c/big.bin"]
    assert store.list("a/c") == ["a/c/big.bin"]
    store.delete("a/c/big.bin")
    store.delete("a/c/big.bin")  # deleting a missing object is fine
    assert store.list() == ["a/b.json"]
    with pytest.raises(NotFound):
        store.download_file("a/c/big.bin", str(dst))


def test_conditional_writes_are_compare_and_swap(store):
    g1 = store.write("MANIFEST.json", b"v1", if_generation_match=0)
    with pytest.raises(PreconditionFailed):
        store.write("MANIFEST.json", b"other", if_generation_match=0)  # exists already
    g2 = store.write("MANIFEST.json", b"v2", if_generation_match=g1)
    assert g2 != g1
    with pytest.raises(PreconditionFailed):
        store.write("MANIFEST.json", b"stale", if_generation_match=g1)
    assert store.read("MANIFEST.json") == (b"v2", g2)


def test_a_gcs_store_lists_only_its_own_prefix(gcs_bucket):
    a = open_store(f"gs://{gcs_bucket}/runs/a")
    b = open_store(f"gs://{gcs_bucket}/runs/ab")
    a.write("x", b"1")
    b.write("y", b"2")
    assert a.list() == ["x"] and b.list() == ["y"]
    assert isinstance(a, GCSStore) and a.uri == f"gs://{gcs_bucket}/runs/a"


def test_local_names_cannot_escape_the_root(tmp_path):
    store = LocalStore(str(tmp_path / "root"))
    with pytest.raises(ValueError):
        store.write("../outside", b"x")
    assert not (tmp_path / "outside").exists()


def test_uris_pick_the_backend(tmp_path):
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert open_store(f"file://{tmp_path}").root == str(tmp_path)
    with pytest.raises(ValueError, match="bucket"):
        open_store("gs://")
    with pytest.raises(ValueError, match="only gs://"):
        open_store("s3://bucket/x")


def test_transient_errors_are_retried_with_growing_delays():
    waits, calls = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise TransientStorageError("503")
        return "done"

    assert with_retries(flaky, what="t", base_delay=1.0, sleep=waits.append) == "done"
    assert len(waits) == 2 and 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0


def test_a_persistent_error_is_raised_after_the_last_attempt():
    waits = []

    def down():
        raise TransientStorageError("unreachable")

    with pytest.raises(TransientStorageError):
        with_retries(down, what="t", attempts=4, sleep=waits.append)
    assert len(waits) == 3


def test_other_errors_are_not_retried():
    calls = []

    def refused():
        calls.append(1)
        raise PreconditionFailed("moved")

    with pytest.raises(PreconditionFailed):
        with_retries(refused, what="t", sleep=lambda s: None)
    assert len(calls) == 1


def test_gcs_outage_is_transient(tmp_path):
    # Nothing listens on this port: a connection error, which the caller may retry.
    import os

    os.environ["STORAGE_EMULATOR_HOST"] = "http://127.0.0.1:9"
    try:
        store = GCSStore("nobody", "x", retry_timeout=0.5)
        with pytest.raises(TransientStorageError):
            with_retries(lambda: store.read("MANIFEST.json"), what="t", attempts=1)
    finally:
        os.environ.pop("STORAGE_EMULATOR_HOST")


def test_temporary_names_are_unique_to_each_write_and_carry_the_writers_pid(tmp_path):
    path = str(tmp_path / "status.json")
    names = {temporary_path(path) for _ in range(1000)}
    assert len(names) == 1000
    assert all(n.startswith(f"{path}{TEMPORARY_MARK}{os.getpid()}.") for n in names)


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    (tmp_path / "a.json").write_text("old")
    replace_file(str(tmp_path / "a.json"), b"new")
    assert (tmp_path / "a.json").read_text() == "new"
    (tmp_path / "d").mkdir()  # os.replace cannot put a file over a directory
    with pytest.raises(OSError):
        replace_file(str(tmp_path / "d"), b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "d"]
    assert list((tmp_path / "d").iterdir()) == []
