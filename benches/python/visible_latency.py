"""Append-to-visible latency: a reader in another process (spawn) blocked in
Reader.next(timeout), the writer appending one stamped record every GAP seconds.

Uses only what every build has (readonly=True, next(timeout), refresh), so it compares this
build with an earlier one: run it with each build's Python. The full benchmark rows (with a
pipe baseline) are in `tidelog bench`; see docs/BENCHMARKS.md.

    python benches/python/visible_latency.py [SAMPLES=100] [GAP_S=0.02]
"""

import multiprocessing as mp
import struct
import sys
import tempfile
import time

import tidelog

SAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 100
GAP_S = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02


def reader(path, n, out, ready):
    with tidelog.open(path, readonly=True) as ro:
        while "t" not in ro.topics():
            ro.refresh()
            time.sleep(0.001)
        r = ro.reader("t", start="latest")
        ready.set()
        lat = []
        while len(lat) < n:
            rec = r.next(timeout=5.0)
            if rec is None:
                break
            now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            (stamp,) = struct.unpack_from("<q", bytes(rec))
            lat.append((now - stamp) / 1000)
        out.put(lat)


def main():
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as d:
        with tidelog.open(d) as wal:
            wal.append("t", b"\0" * 100)
            wal.flush()
            out, ready = ctx.Queue(), ctx.Event()
            p = ctx.Process(target=reader, args=(d, SAMPLES, out, ready))
            p.start()
            ready.wait(30)
            time.sleep(0.05)
            for _ in range(SAMPLES):
                stamp = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                wal.append("t", struct.pack("<q", stamp) + b"\0" * 92)
                time.sleep(GAP_S)
            lat = sorted(out.get(timeout=60))
            p.join()
    if not lat:
        print("no samples")
        return
    p50 = lat[len(lat) // 2]
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"samples {len(lat)} p50 {p50:.1f} us p99 {p99:.1f} us")


if __name__ == "__main__":
    main()
