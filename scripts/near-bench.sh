#!/usr/bin/env bash
# Near-cache read speed against its peers, measured in the same run: plain SharedCache hit
# reads, NearCache hit reads (same keys, same 40-byte values), a direct Redis GET per
# read from one client, and a 90 % hit mix (one read in ten a key never read before: a
# fill, that is a placeholder, a GET and a compare-and-swap). `mc-test-helper near-bench`
# interleaves plain and near reads (best of seven rounds each), and GETs and the mix (best
# of five rounds each), within a rep; this script runs REPS reps, one after another, and
# prints every rep, then each rep's ratios (best and median over reps), then the best and
# the median of each figure with ratios best/best (median/median).
#
#   scripts/near-bench.sh                 # REPS=5 READS=1000000 WRITES=500
#   REPS=7 NO_BUILD=1 scripts/near-bench.sh
#
# Per client, a 90 % hit ratio cannot be more than 10× a direct GET when each miss costs
# a GET (Amdahl: 0.1 × t_GET per read at least), so the figure to compare with "100×" is
# the all-hits one. Starts its own redis-server on a loopback port (never 6379).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${REPS:-5}"
READS="${READS:-1000000}"
WRITES="${WRITES:-500}"
command -v redis-server >/dev/null || { echo "error: redis-server is not installed" >&2; exit 2; }
[ -n "${NO_BUILD:-}" ] || swift build -c release --product mc-test-helper >&2
BIN="$(swift build -c release --show-bin-path)/mc-test-helper"
DIR="$(mktemp -d /dev/shm/mc-nearbench.XXXXXX)"
PORT="${PORT:-$((20000 + RANDOM % 20000))}"
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" --daemonize no \
  --loglevel warning >/dev/null 2>&1 &
RPID=$!
trap 'kill $RPID 2>/dev/null; wait $RPID 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"
echo "# $BIN near-bench redis://127.0.0.1:$PORT $READS $WRITES, $REPS reps"
for r in $(seq "$REPS"); do
  "$BIN" near-bench "redis://127.0.0.1:$PORT" "$READS" "$WRITES" | sed "s/^/rep $r: /" | tee -a "$DIR/out"
done
python3 - "$DIR/out" <<'EOF'
import re, statistics, sys
reps = {}
for line in open(sys.argv[1]):
    m = re.match(r"rep (\d+): (.*)", line)
    if not m:
        continue
    r, text = int(m.group(1)), m.group(2)
    d = reps.setdefault(r, {})
    if (x := re.search(r"SharedCache ([\d.]+) ns, NearCache ([\d.]+) ns", text)):
        d["plain"], d["near"] = float(x.group(1)), float(x.group(2))
    if (x := re.search(r"direct Redis GET: ([\d.]+) µs", text)):
        d["get"] = float(x.group(1)) * 1000
    if (x := re.search(r"90% hit mix: ([\d.]+) µs", text)):
        d["mix"] = float(x.group(1)) * 1000
    if (x := re.search(r"p50 (\d+) µs, p99 (\d+) µs, max (\d+) µs", text)):
        d["p50"], d["p99"], d["max"] = (int(v) for v in x.groups())
rows = [d for d in reps.values() if len(d) == 7]
if not rows:
    sys.exit("no complete rep")
def col(k):
    return [d[k] for d in rows]
def best_med(k):
    v = col(k)
    return min(v), statistics.median(v)
(pb, pm), (nb, nm), (gb, gm), (mb, mm) = (best_med(k) for k in ("plain", "near", "get", "mix"))
def ratios(f):
    v = [f(d) for d in rows]
    return max(v), statistics.median(v)
rn, rh, rm = ratios(lambda d: d["plain"] / d["near"]), ratios(lambda d: d["get"] / d["near"]), ratios(lambda d: d["get"] / d["mix"])
print(f"per-rep ratios (best, median): near/plain {rn[0]:.2f}x ({rn[1]:.2f}x); all hits vs GET {rh[0]:.0f}x ({rh[1]:.0f}x); "
      f"90% mix vs GET {rm[0]:.1f}x ({rm[1]:.1f}x)")
print(f"summary over {len(rows)} reps (best, median):")
print(f"  SharedCache hit {pb:.1f} ns ({pm:.1f}); NearCache hit {nb:.1f} ns ({nm:.1f}): "
      f"near/plain throughput {pb / nb:.2f}x ({pm / nm:.2f}x)")
print(f"  direct GET {gb / 1000:.1f} µs ({gm / 1000:.1f}); all hits vs GET {gb / nb:.0f}x ({gm / nm:.0f}x); "
      f"90% hit mix {mb / 1000:.2f} µs ({mm / 1000:.2f}): vs GET {gb / mb:.1f}x ({gm / mm:.1f}x), at most 10x")
print(f"  staleness per write, median of reps: p50 {statistics.median(col('p50'))} µs, "
      f"p99 {statistics.median(col('p99'))} µs, max {statistics.median(col('max'))} µs (worst rep max {max(col('max'))} µs)")
EOF
