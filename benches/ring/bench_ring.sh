#!/usr/bin/env bash
# Ring backend benchmarks (issue 5): tidelog's ring (ring_writebench) against fio on the same
# target in the same run, printed as a markdown table of ratios.
#
# Targets: a preallocated, fully written file in a temporary directory (under $TMPDIR), and,
# when run as root with losetup, a loop device (--direct-io=on, 4 KiB sectors) over a fully
# written image next to it. Per target and round: the ring with 1 KiB records unpaced (which
# also tells the block size it issues), fio at that block size, fio at 256 KiB, the ring with
# 256 KiB records unpaced, then the ring at half of each unpaced throughput for latency, each
# followed by fio paced to the same rate at the block size the ring issued (the device's own tail).
# fio matches the ring's write path: O_DIRECT, O_DSYNC (--sync=dsync), sequential, 4 writes
# in flight through io_uring (FIO_ENGINE=psync: 4 jobs of one blocking write each, over
# disjoint quarters). Figures are medians over the rounds; a ratio is the median of the
# per-round ratios (each fio run and its ring run back to back).
#
# Environment: SECS (measured seconds per run, default 2; each run also warms up 1 s),
# ROUNDS (default 5; short runs in many rounds pair each fio run closely with its ring run), SIZE_MIB (file and image size, default 2048), ENGINE (ring io_engine:
# auto, io_uring, threads), FIO_ENGINE (io_uring or psync), LOG_DIR (keep every run's output
# there). About 5 minutes with the defaults. Needs root for apt-get (fio) and losetup.
set -euo pipefail

SECS=${SECS:-2}
ROUNDS=${ROUNDS:-5}
SIZE_MIB=${SIZE_MIB:-2048}
ENGINE=${ENGINE:-auto}
FIO_ENGINE=${FIO_ENGINE:-io_uring}
INFLIGHT=4

say() { echo "bench_ring: $*" >&2; }
die() {
    say "$*"
    exit 1
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

if ! command -v fio >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing fio (apt-get install -y fio)"
        if ! apt-get install -y fio >/dev/null 2>&1; then
            apt-get update >/dev/null 2>&1 || true
            apt-get install -y fio >/dev/null 2>&1 ||
                die "could not install fio with apt-get; install fio and run again"
        fi
    else
        die "fio is not installed, and installing it needs root and apt-get; install fio and run again"
    fi
fi

say "building ring_writebench (release)"
(cd "$repo" && cargo build --release -q -p tidelog-benches --bin ring_writebench)
bin="${CARGO_TARGET_DIR:-$repo/target}/release/ring_writebench"
[ -x "$bin" ] || die "no binary at $bin"

work=$(mktemp -d "${TMPDIR:-/tmp}/tidelog-ring-bench.XXXXXX")
loopdev=""
cleanup() {
    if [ -n "$loopdev" ]; then
        losetup -d "$loopdev" || say "could not detach $loopdev"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ -n "${LOG_DIR:-}" ]; then
    mkdir -p "$LOG_DIR"
    logs=$LOG_DIR
else
    logs=$work/logs
    mkdir -p "$logs"
fi

prewrite() {
    dd if=/dev/zero of="$1" bs=1M count="$SIZE_MIB" oflag=direct conv=fsync status=none ||
        die "cannot write $1 with O_DIRECT (tmpfs?); set TMPDIR to a directory on a disk"
}

say "preparing a $SIZE_MIB MiB file"
prewrite "$work/ring.file"
targets=("file:$work/ring.file")
if [ "$(id -u)" -eq 0 ] && command -v losetup >/dev/null 2>&1; then
    prewrite "$work/loop.img"
    if loopdev=$(losetup -f --show --direct-io=on --sector-size 4096 "$work/loop.img" 2>"$logs/losetup.err"); then
        targets+=("loop:$loopdev")
    else
        loopdev=""
        say "losetup failed ($(head -c 200 "$logs/losetup.err")); skipping the loop device"
    fi
else
    say "not root or no losetup: skipping the loop device"
fi

# One JSON field (a number or true/false) of a ring_writebench summary line.
jget() { sed -n "s/.*\"$2\":\\([^,}]*\\).*/\\1/p" <<<"$1"; }

# ring LABEL PATH RECORD_BYTES THROUGHPUT -> the JSON summary line.
ring() {
    local log="$logs/$1-ring.log"
    shift
    "$bin" --path "$1" --format --direct required --engine "$ENGINE" --inflight "$INFLIGHT" \
        --block-bytes 256K --record-size "$2" --throughput "$3" --warmup 1 \
        --duration "$SECS" --json >"$log" 2>&1 || {
        cat "$log" >&2
        die "ring_writebench failed"
    }
    say "  ring $2 B records$([ "$3" -gt 0 ] && echo " at $(($3 / 1000000)) MB/s"): $(grep '^SUMMARY' "$log" | cut -c 9-)"
    grep '^{' "$log"
}

# fio_terse LOG PATH BLOCK_SIZE ARGS... -> fio's terse v3 result line: a sequential durable
# write (O_DIRECT + O_DSYNC, as the ring opens its target) with the run length of this script.
fio_terse() {
    local log=$1 path=$2 bs=$3
    shift 3
    fio --name=seqwrite --filename="$path" --rw=write --bs="$bs" --direct=1 --sync=dsync \
        --time_based --runtime="$SECS" --ramp_time=1 --group_reporting --output-format=terse \
        "$@" >"$log" 2>&1 || {
        cat "$log" >&2
        die "fio failed"
    }
    grep '^3;' "$log" | tail -1
}

# fio_run LABEL PATH BLOCK_SIZE -> "MB/s p99_us"
fio_run() {
    local size=$((SIZE_MIB * 1024 * 1024)) engine
    if [ "$FIO_ENGINE" = psync ]; then
        engine=(--ioengine=psync --numjobs="$INFLIGHT" --size=$((size / INFLIGHT))
            --offset_increment=$((size / INFLIGHT)))
    else
        engine=(--ioengine=io_uring --iodepth="$INFLIGHT" --size="$size")
    fi
    local line
    line=$(fio_terse "$logs/$1-fio.log" "$2" "$3" "${engine[@]}")
    # Terse v3: field 48 is write KiB/s, field 71 the write completion latency p99 (µs).
    awk -F';' '{ split($71, p, "="); printf "%.1f %s\n", $48 * 1024 / 1e6, p[2] }' <<<"$line"
    say "  fio bs=$3: $(awk -F';' '{ printf "%.1f MB/s, %s IOPS", $48 * 1024 / 1e6, $49 }' <<<"$line")"
}

# fio_rate LABEL PATH BLOCK_SIZE BYTES_PER_S -> "p99_us mean_us": fio's own write latency when
# paced to the ring's half-rate run, at the block size the ring issued there: the device's share
# of the ring's append-to-durable tail. Always io_uring, 4 in flight: the ring's own engine.
fio_rate() {
    local line
    line=$(fio_terse "$logs/$1-fio-rate.log" "$2" "$3" --rate="$4" --ioengine=io_uring \
        --iodepth="$INFLIGHT" --size=$((SIZE_MIB * 1024 * 1024)))
    # Terse v3: field 57 is the write completion latency mean (µs), field 71 its p99.
    awk -F';' '{ split($71, p, "="); printf "%s %.0f\n", p[2], $57 }' <<<"$line"
    say "  fio bs=$3 at $(($4 / 1000000)) MB/s: write p99 $(awk -F';' '{ split($71, p, "="); print p[2] }' <<<"$line") µs"
}

median() {
    tr ' ' '\n' | grep -v '^$' | sort -g |
        awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

declare -A acc
add() { acc[$1]="${acc[$1]:-} $2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
    for t in "${targets[@]}"; do
        name=${t%%:*}
        path=${t#*:}
        say "round $round/$ROUNDS, $name"
        j=$(ring "r$round-$name-1k" "$path" 1024 0)
        small_mb=$(jget "$j" mb_s)
        kib=$(jget "$j" kib_per_block)
        bs_kib=$(awk -v k="$kib" 'BEGIN { b = int(k / 4 + 0.5) * 4; print (b < 4 ? 4 : b) }')
        add "$name.small.ring" "$small_mb"
        add "$name.small.p99" "$(jget "$j" lat_p99_us)"
        add "$name.small.kib" "$kib"
        add "$name.small.qd" "$(jget "$j" dev_queue_depth)"
        add "$name.small.cpu" "$(jget "$j" cpu_pct)"
        add "$name.small.bs" "$bs_kib"
        out=$(fio_run "r$round-$name-${bs_kib}k" "$path" "${bs_kib}k")
        fio_mb=${out%% *}
        add "$name.small.fio" "$fio_mb"
        add "$name.small.ratio" "$(ratio "$small_mb" "$fio_mb")"

        out=$(fio_run "r$round-$name-256k" "$path" 256k)
        fio_mb=${out%% *}
        j=$(ring "r$round-$name-256k" "$path" 262144 0)
        big_mb=$(jget "$j" mb_s)
        add "$name.big.fio" "$fio_mb"
        add "$name.big.ring" "$big_mb"
        add "$name.big.ratio" "$(ratio "$big_mb" "$fio_mb")"
        add "$name.big.p99" "$(jget "$j" lat_p99_us)"
        add "$name.big.kib" "$(jget "$j" kib_per_block)"
        add "$name.big.qd" "$(jget "$j" dev_queue_depth)"
        add "$name.big.cpu" "$(jget "$j" cpu_pct)"

        for w in small big; do
            if [ $w = small ]; then rec=1024 mb=$small_mb; else rec=262144 mb=$big_mb; fi
            half=$(awk -v m="$mb" 'BEGIN { printf "%d", m * 1e6 / 2 }')
            j=$(ring "r$round-$name-$w-half" "$path" "$rec" "$half")
            add "$name.$w-half.ring" "$(jget "$j" mb_s)"
            add "$name.$w-half.p99" "$(jget "$j" lat_p99_us)"
            add "$name.$w-half.avg" "$(jget "$j" lat_avg_us)"
            add "$name.$w-half.kib" "$(jget "$j" kib_per_block)"
            add "$name.$w-half.qd" "$(jget "$j" dev_queue_depth)"
            add "$name.$w-half.cpu" "$(jget "$j" cpu_pct)"
            kib=$(jget "$j" kib_per_block)
            bs_kib=$(awk -v k="$kib" 'BEGIN { b = int(k / 4 + 0.5) * 4; print (b < 4 ? 4 : b) }')
            out=$(fio_rate "r$round-$name-$w-half" "$path" "${bs_kib}k" "$half")
            add "$name.$w-half.fio_p99" "${out%% *}"
            add "$name.$w-half.fio_avg" "${out##* }"
            add "$name.$w-half.fio_bs" "$bs_kib"
            add "$name.$w-half.p99_ratio" "$(ratio "$(jget "$j" lat_p99_us)" "${out%% *}")"
        done
    done
done
elapsed=$(($(date +%s) - start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
fstype=$(findmnt -no FSTYPE -T "$work" 2>/dev/null || stat -f -c %T "$work")

m() { median <<<"${acc[$1]:-}"; }
f1() { awk -v x="$1" 'BEGIN { if (x == "nan" || x == "") print "-"; else printf "%.1f", x }'; }
f2() { awk -v x="$1" 'BEGIN { if (x == "nan" || x == "") print "-"; else printf "%.2f", x }'; }
f0() { awk -v x="$1" 'BEGIN { if (x == "nan" || x == "") print "-"; else printf "%.0f", x }'; }
yes_no() { awk -v x="$1" -v op="$2" -v t="$3" 'BEGIN { ok = (op == ">=") ? x >= t : x <= t; print (ok ? "yes" : "no") }'; }
fio_notes() { echo "fio paced alike at bs=$(f0 "$(m "$1.fio_bs")")k: write p99 $(f0 "$(m "$1.fio_p99")") µs, avg $(f0 "$(m "$1.fio_avg")") µs; ring p99 / fio p99 $(f2 "$(m "$1.p99_ratio")")"; }
notes() { echo "$(f1 "$(m "$1.kib")") KiB blocks, dev qd $(f1 "$(m "$1.qd")"), cpu $(f0 "$(m "$1.cpu")") %"; }

echo
echo "Ring backend vs fio, $(date -u +%Y-%m-%d), $(nproc) CPUs, kernel $(uname -r), $fstype file system;"
echo "fio $(fio --version | sed 's/^fio-//') $FIO_ENGINE, 4 in flight, O_DIRECT + O_DSYNC; ring io_engine $ENGINE, inflight 4, block 256 KiB / 333 µs;"
echo "median of $ROUNDS rounds of $SECS s (after 1 s warm-up) per run; MB = 10^6 bytes; run took ${elapsed} s;"
echo "load average (1, 5, 15 min) $load_before before, $load_after after."
echo
echo "| target | workload | fio MB/s | ring MB/s | ratio | ring p99 µs | target | met? | notes |"
echo "|---|---|---|---|---|---|---|---|---|"
for t in "${targets[@]}"; do
    n=${t%%:*}
    r=$(m "$n.big.ratio")
    echo "| $n | 256 KiB records vs fio bs=256k | $(f1 "$(m "$n.big.fio")") | $(f1 "$(m "$n.big.ring")") | $(f2 "$r") | $(f0 "$(m "$n.big.p99")") | ratio >= 0.9 | $(yes_no "$r" ">=" 0.9) | $(notes "$n.big") |"
    r=$(m "$n.small.ratio")
    bs=$(m "$n.small.bs")
    echo "| $n | 1 KiB records vs fio bs=$(f0 "$bs")k (the ring's block size) | $(f1 "$(m "$n.small.fio")") | $(f1 "$(m "$n.small.ring")") | $(f2 "$r") | $(f0 "$(m "$n.small.p99")") | ratio >= 0.8 | $(yes_no "$r" ">=" 0.8) | $(notes "$n.small") |"
    p=$(m "$n.small-half.p99")
    echo "| $n | 1 KiB records at half the unpaced rate | - | $(f1 "$(m "$n.small-half.ring")") | - | $(f0 "$p") | p99 <= 1000 µs | $(yes_no "$p" "<=" 1000) | avg $(f0 "$(m "$n.small-half.avg")") µs, $(notes "$n.small-half"); $(fio_notes "$n.small-half") |"
    p=$(m "$n.big-half.p99")
    echo "| $n | 256 KiB records at half the unpaced rate | - | $(f1 "$(m "$n.big-half.ring")") | - | $(f0 "$p") | - | - | avg $(f0 "$(m "$n.big-half.avg")") µs, $(notes "$n.big-half"); $(fio_notes "$n.big-half") |"
done
echo
echo "Per round (MB/s; ratio):"
for t in "${targets[@]}"; do
    n=${t%%:*}
    echo "- $n 256 KiB: fio${acc[$n.big.fio]}; ring${acc[$n.big.ring]}; ratio${acc[$n.big.ratio]}"
    echo "- $n 1 KiB: fio${acc[$n.small.fio]} at bs (KiB)${acc[$n.small.bs]}; ring${acc[$n.small.ring]}; ratio${acc[$n.small.ratio]}"
    echo "- $n half rate p99 µs: 1 KiB${acc[$n.small-half.p99]}; 256 KiB${acc[$n.big-half.p99]}"
    echo "- $n fio paced alike, write p99 µs: 1 KiB run${acc[$n.small-half.fio_p99]}; 256 KiB run${acc[$n.big-half.fio_p99]}"
done
