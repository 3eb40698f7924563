"""Zero-copy views outlive their reader, their Wal and their data file.

The scenarios that could crash the interpreter (a view into an unmapped or truncated file
reads as SIGSEGV/SIGBUS) run in a child interpreter, so a crash fails one test with the
child's output instead of killing the run.
"""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path

import numpy as np
import pytest
import tidelog
from conftest import open_small, payload, run_python

TESTS_DIR = str(Path(__file__).resolve().parent)

# Every test runs on the mmap and the ring backend (see conftest.py).
pytestmark = pytest.mark.usefixtures("backend")


# The child builds views of records from the first data file (offset 0), the middle and
# the end, in every form (Record, its value, memoryview, numpy), drops everything but the
# views, lets `scenario` remove the file under them, and checks every byte.
CHILD = """
import gc, shutil, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import tidelog
from conftest import data_files, open_small, payload, wait_until

path, scenario = sys.argv[2], sys.argv[3]
COUNT, SIZE = 1200, 1000  # about 20 blocks of 64 KiB: three 8-block files
wal = open_small(path, fsync="never")
for i in range(COUNT):
    assert wal.append("doomed", payload(i, SIZE)) == i
first_file = data_files(path)[0]
assert len(data_files(path)) >= 3, data_files(path)

views = []  # (offset, view)
reader = wal.reader("doomed", "consumer")
for rec in reader:
    if rec.offset in (0, 1, 600, COUNT - 1):
        views.append((rec.offset, rec))
        views.append((rec.offset, rec.value))
        views.append((rec.offset, memoryview(rec)))
        views.append((rec.offset, np.frombuffer(rec, dtype=np.uint8)))
for offset in (2, 700):
    rec = wal.read("doomed", offset)
    views.append((offset, memoryview(rec)))
    views.append((offset, rec.value[10:20]))
del rec

if scenario == "delete_topic":
    reader.close()
    wal.delete_topic("doomed")
    wait_until(lambda: not first_file.exists(), "the deleted topic's first file to go")
elif scenario == "consumed":
    reader.commit()
    reader.close()
    wait_until(lambda: not first_file.exists(), "the consumed first file to go")
elif scenario == "closed":
    reader.close()
    wal.close()
elif scenario == "dropped":
    # Never closed: the handle goes with its last reference, which must release the lock.
    reader.close()
    del reader, wal
    gc.collect()
    wal = open_small(path, fsync="never")
    assert wal.topic_info("doomed").next_offset == COUNT
    reader = None
elif scenario == "removed":
    reader.close()
    wal.close()
    shutil.rmtree(path)
else:
    raise SystemExit(f"unknown scenario {scenario}")
del reader
if scenario in ("closed", "removed"):
    del wal
gc.collect()

# Overwrite freed memory with garbage so a dangling view would show wrong bytes.
junk = [bytearray(b"\\xee" * 4096) for _ in range(4000)]
for offset, view in views:
    got = bytes(view)
    want = payload(offset, SIZE)
    if isinstance(view, memoryview) and len(got) == 10:
        want = want[10:20]
    assert got == want, (scenario, offset, type(view).__name__, got[:32])
if scenario in ("delete_topic", "consumed", "dropped"):
    wal.close()
print("OK", len(views))
"""


@pytest.mark.parametrize("scenario", ["closed", "dropped", "removed", "delete_topic", "consumed"])
def test_views_outlive_wal_and_file(tmp_path: Path, scenario: str) -> None:
    proc = run_python(CHILD, TESTS_DIR, str(tmp_path / "wal"), scenario)
    assert proc.returncode == 0, (
        f"child exited with {proc.returncode} (negative: killed by that signal)\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    assert proc.stdout.strip() == "OK 20", proc.stdout


def test_view_outlives_reader_and_record(wal: tidelog.Wal) -> None:
    wal.append("t", b"persistent bytes")
    reader = wal.reader("t")
    rec = reader.next()
    assert rec is not None
    value = rec.value
    whole = memoryview(rec)
    arr = np.frombuffer(rec, dtype=np.uint8)
    reader.close()
    del rec, reader
    gc.collect()
    assert value.tobytes() == b"persistent bytes"
    assert whole.tobytes() == b"persistent bytes"
    assert arr.tobytes() == b"persistent bytes"


def test_record_survives_reader_moving_on(wal: tidelog.Wal) -> None:
    for i in range(300):
        wal.append("t", payload(i, 900))
    with wal.reader("t") as r:
        first = r.next()
        rest = list(r)
    assert first is not None
    assert len(rest) == 299
    assert bytes(first) == payload(0, 900)
    assert bytes(rest[-1]) == payload(299, 900)


def test_record_usable_after_close(tmp_path: Path) -> None:
    wal = open_small(tmp_path)
    wal.append("t", b"value", key=b"key", timestamp=1234)
    rec = wal.read("t", 0)
    wal.close()
    # Metadata and bytes stay readable once the handle is gone.
    assert (rec.offset, rec.timestamp, rec.key) == (0, 1234, b"key")
    assert bytes(rec) == b"value"
    assert len(rec) == 5


def test_views_are_read_only(wal: tidelog.Wal) -> None:
    wal.append("t", b"abc")
    rec = wal.read("t", 0)
    with pytest.raises(TypeError):
        rec.value[0] = 0
    with pytest.raises(ValueError):
        np.frombuffer(rec, dtype=np.uint8)[0] = 0
    with pytest.raises((BufferError, TypeError)):
        # ctypes asks for a writable export, which must be refused: it is the file's memory.
        (ctypes.c_char * 3).from_buffer(rec)
    assert bytes(wal.read("t", 0)) == b"abc"
