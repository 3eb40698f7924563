"""What an open after a crash found and repaired (`Wal.recovery_report()`): records of the
last group commit, damaged after the crash, come back from the commit copy beside them."""

from __future__ import annotations

from pathlib import Path

import pytest
import tidelog
from conftest import SMALL, data_files, run_python

RECORDS = 50


def marker(i: int) -> bytes:
    return b"<REC%05d>" % i


def test_a_fresh_directory_reports_nothing_found(tmp_path: Path) -> None:
    wal = tidelog.open(tmp_path)
    report = wal.recovery_report()
    assert isinstance(report, tidelog.RecoveryReport)
    assert (report.files, report.extents, report.torn_tails) == (0, 0, 0)
    assert (report.repaired_from_copies, report.damaged_commit_copies) == (0, 0)
    assert repr(report).startswith("RecoveryReport(files=0,")
    wal.close()
    with pytest.raises(tidelog.ClosedError):
        wal.recovery_report()


def test_a_flipped_record_of_the_last_group_comes_back_from_its_commit_copy(
    tmp_path: Path,
) -> None:
    # A child appends durably and dies without closing: the last group commit's records are
    # claimed by the commit copy beside the progress slot.
    child = run_python(
        f"""
        import os, sys, tidelog
        # Small files: the test reads and writes the data file whole.
        wal = tidelog.open(sys.argv[1], fsync="always", **{SMALL!r})
        for i in range({RECORDS}):
            wal.append("t", b"<REC%05d>" % i + b"x" * 40)
        os._exit(0)
        """,
        str(tmp_path),
    )
    assert child.returncode == 0, child.stderr
    # Flip a byte of the last record's own frame (the copy, in the extent's header, comes
    # first in the file; the frame is the last occurrence).
    (path,) = data_files(tmp_path)
    data = bytearray(path.read_bytes())
    at = data.rfind(marker(RECORDS - 1))
    assert data.find(marker(RECORDS - 1)) < at, "the commit copy holds the record too"
    data[at + 2] ^= 0x20
    path.write_bytes(bytes(data))
    # A read-only open writes nothing: it reads the record from the copy, in memory.
    with tidelog.open(tmp_path, readonly=True, **SMALL) as ro:
        assert ro.recovery_report().repaired_from_copies == 1
        assert bytes(ro.read("t", RECORDS - 1))[:10] == marker(RECORDS - 1)
        with ro.reader("t", start="earliest") as reader:
            got = [bytes(r)[:10] for r in reader]
        assert got == [marker(i) for i in range(RECORDS)]
    assert path.read_bytes() == bytes(data), "a read-only open wrote nothing"
    # A writable open repairs it from the copy.
    with tidelog.open(tmp_path, **SMALL) as wal:
        report = wal.recovery_report()
        assert report.repaired_from_copies == 1, report
        assert report.torn_tails == 0, report
        with wal.reader("t", start="earliest") as reader:
            got = [bytes(r)[:10] for r in reader]
        assert got == [marker(i) for i in range(RECORDS)]
    with tidelog.open(tmp_path, **SMALL) as wal:
        assert wal.recovery_report().repaired_from_copies == 0
        assert bytes(wal.read("t", RECORDS - 1))[:10] == marker(RECORDS - 1)
