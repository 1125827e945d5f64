# shellcheck shell=bash
# zcnet's zero-copy receiver at its default settings but for the mode (`zcnet bench rx --listen --mode
# zerocopy`: RxConfig::default() with RxMode::ZeroCopy, whose default is Auto) against `tcp_mmap -s -z -M 4108`, both fed by the same sender (zcnet's
# MSG_ZEROCOPY sender with --raw, RX_MIB MiB per connection): Gbit/s, CPU per MiB and % mapped, as
# tcp_mmap prints them. Also checks the byte counts of zcnet's sender into `tcp_mmap -s` (with and
# without -z) and of tcp_mmap's own -z sender (32 GiB, once) into zcnet's receiver.

RX_MIB="${RX_MIB:-1024}"
# TCP_MAXSEG that leaves one 4096-byte page of payload per segment: 4096 + 12 bytes of timestamps.
PAGE_MSS=4108

zc_sender() {
	"$ZCNET" bench rx --connect "127.0.0.1:$1" --raw --sender zerocopy --mib "$2" >/dev/null
}

# tcp_mmap_receive FLAG MIB: sets MM_MB MM_PCT MM_GBIT MM_US (µs per MiB) from its summary.
tcp_mmap_receive() {
	local port
	port="$(free_port)"
	# Line-buffered: its summary must reach the file before it is stopped.
	stdbuf -oL "$REFS/tcp_mmap" -s $1 -M "$PAGE_MSS" -p "$port" -4 >"$SCRATCH/mm" 2>&1 &
	local pid=$!
	sleep 0.3
	zc_sender "$port" "$2"
	for _ in $(seq 1 100); do
		grep -q "usec per MB" "$SCRATCH/mm" && break
		sleep 0.1
	done
	# tcp_mmap -s serves forever: stop it (started above) by its pid.
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	read -r MM_MB MM_PCT MM_GBIT MM_US < <(awk '
		/^received/ { mb = $2; pct = substr($4, 2); gbit = $10 }
		/usec per MB/ { for (i = 1; i <= NF; i++) if ($i == "usec") us = $(i - 1) }
		END { print mb, pct, gbit, us }' "$SCRATCH/mm")
}

# zc_receive MIB: zcnet's zero-copy receiver at its defaults; sets ZR_MB ZR_PCT ZR_GBIT ZR_US (µs per MiB).
zc_receive() {
	local port
	port="$(free_port)"
	"$ZCNET" bench rx --listen "127.0.0.1:$port" --once --mode zerocopy --no-verify --interval 0 \
		--json >"$SCRATCH/zr" &
	local pid=$!
	sleep 0.3
	zc_sender "$port" "$1"
	wait "$pid"
	read -r ZR_MB ZR_PCT ZR_GBIT ZR_US < <(python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
print("%g %.4f %.4f %.2f" % (r["bytes"] / 2**20, r["mapped_pct"], r["gbit_per_s"], r["cpu_us_per_mb"] * 1.048576))' "$SCRATCH/zr")
}

declare -A total=()
add() { total[$1]=$(awk -v a="${total[$1]:-0}" -v b="$2" 'BEGIN { print a + b }'); }
mean() { awk -v a="${total[$1]}" -v n="$ROUNDS" 'BEGIN { printf "%.4f\n", a / n }'; }

for round in $(seq 1 "$ROUNDS"); do
	run_ref() { tcp_mmap_receive -z "$RX_MIB"; }
	run_zc() { zc_receive "$RX_MIB"; }
	in_order "$round" run_ref run_zc
	pair_line "round $round receiver Gbit/s" "$ZR_GBIT" "$MM_GBIT"
	pair_line "round $round receiver usec per MiB" "$ZR_US" "$MM_US"
	pair_line "round $round receiver % mapped" "$ZR_PCT" "$MM_PCT"
	check_equal "zcnet rx --connect -> tcp_mmap -s -z (MiB)" "$RX_MIB" "$MM_MB"
	for v in GBIT US PCT; do
		zr="ZR_$v"
		mm="MM_$v"
		add "zr_$v" "${!zr}"
		add "mm_$v" "${!mm}"
	done
done
pair_line "mean of rounds receiver Gbit/s" "$(mean zr_GBIT)" "$(mean mm_GBIT)"
pair_line "mean of rounds receiver usec per MiB" "$(mean zr_US)" "$(mean mm_US)"
pair_line "mean of rounds receiver % mapped" "$(mean zr_PCT)" "$(mean mm_PCT)"

tcp_mmap_receive "" 64
check_equal "zcnet rx --connect -> tcp_mmap -s (MiB)" 64 "$MM_MB"

# tcp_mmap's client always sends 32 GiB (FILE_SZ), without a header: counted, not verified.
port="$(free_port)"
"$ZCNET" bench rx --listen "127.0.0.1:$port" --once --mode zerocopy --interval 0 --json >"$SCRATCH/zr" &
pid=$!
sleep 0.3
"$REFS/tcp_mmap" -H 127.0.0.1 -z -M "$PAGE_MSS" -p "$port" -4 >/dev/null 2>&1
wait "$pid"
got="$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["bytes"])' "$SCRATCH/zr")"
check_equal "tcp_mmap -z -> zcnet rx --listen (bytes)" "$((1 << 35))" "$got"
