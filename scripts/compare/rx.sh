# shellcheck shell=bash
# What pays on this host for TCP receive, from the kernel's tool and zcnet side by side: five receivers
# fed alike by zcnet's MSG_ZEROCOPY sender (--raw, RX_MIB MiB per connection, MSS 4108 so that pages
# map): `tcp_mmap -s` (copy) and `tcp_mmap -s -z` (mapped) with `-M 4108`, and zcnet's receiver at its
# defaults in each mode (`zcnet bench rx --listen --mode copy|zerocopy|auto`). Per round and as means:
# Gbit/s, CPU per MiB and % mapped, the mapped/copy cost ratio of each tool, and auto against the
# cheaper of tcp_mmap's two. Also checks the byte counts of zcnet's sender into tcp_mmap (with and
# without -z) and of tcp_mmap's own -z sender (32 GiB, once) into zcnet's receiver. As root in its
# own network namespace (own_netns), as tcp.sh.

RX_MIB="${RX_MIB:-1024}"
# TCP_MAXSEG that leaves one 4096-byte page of payload per segment: 4096 + 12 bytes of timestamps.
PAGE_MSS=4108
own_netns "zcnet-rx-$$"

zc_sender() {
	# One stream (one round of one receive mode): tcp_mmap reads one connection at a time.
	in_netns "$ZCNET" bench rx --connect "127.0.0.1:$1" --raw --sender zerocopy --rounds 1 --mode zerocopy \
		--mib "$2" >/dev/null
}

# tcp_mmap_receive FLAG MIB: sets MM_MB MM_PCT MM_GBIT MM_US (µs per MiB) from its summary.
tcp_mmap_receive() {
	local port
	port="$(free_port)"
	# Line-buffered: its summary must reach the file before it is stopped.
	in_netns stdbuf -oL "$REFS/tcp_mmap" -s $1 -M "$PAGE_MSS" -p "$port" -4 >"$SCRATCH/mm" 2>&1 &
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

# zc_receive MODE MIB: zcnet's receiver at its defaults but for the mode, with no observer counting its
# copies (tcp_mmap runs without one); sets ZR_MB ZR_PCT ZR_GBIT
# ZR_US (µs per MiB) and ZR_WHY (auto's choice and its reason, "-" for the fixed modes).
zc_receive() {
	local port
	port="$(free_port)"
	in_netns "$ZCNET" bench rx --listen "127.0.0.1:$port" --once --mode "$1" --interval 0 \
		--no-kernel-copies --json >"$SCRATCH/zr" &
	local pid=$!
	sleep 0.3
	zc_sender "$port" "$2"
	wait "$pid"
	read -r ZR_MB ZR_PCT ZR_GBIT ZR_US ZR_WHY < <(python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
why = r.get("why") or "-"
print("%g %.4f %.4f %.2f %s" % (r["bytes"] / 2**20, r["mapped_pct"], r["gbit_per_s"],
      r["cpu_us_per_mb"] * 1.048576, why.replace(" ", "_")))' "$SCRATCH/zr")
}

declare -A total=()
add() { total[$1]=$(awk -v a="${total[$1]:-0}" -v b="$2" 'BEGIN { print a + b }'); }
mean() { awk -v a="${total[$1]}" -v n="$ROUNDS" 'BEGIN { printf "%.4f\n", a / n }'; }
# Each receiver's µs per MiB in the round under way, by name.
declare -A last=()
lesser() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; }

# One receiver of the five, by name; its figures go into the totals under that name.
# shellcheck disable=SC2317 # called by name below
receive() {
	case "$1" in
	mm_copy) tcp_mmap_receive "" "$RX_MIB" ;;
	mm_map) tcp_mmap_receive -z "$RX_MIB" ;;
	zc_copy | zc_map | zc_auto)
		local mode=${1#zc_}
		[ "$mode" = map ] && mode=zerocopy
		zc_receive "$mode" "$RX_MIB"
		MM_MB=$ZR_MB MM_PCT=$ZR_PCT MM_GBIT=$ZR_GBIT MM_US=$ZR_US
		;;
	esac
	[ "$1" = zc_auto ] && echo "round $round auto chose: ${ZR_WHY//_/ }"
	case "$1" in
	mm_copy) check_equal "zcnet rx --connect -> tcp_mmap -s (MiB)" "$RX_MIB" "$MM_MB" ;;
	mm_map) check_equal "zcnet rx --connect -> tcp_mmap -s -z (MiB)" "$RX_MIB" "$MM_MB" ;;
	esac
	for v in GBIT US PCT; do
		local f="MM_$v"
		add "$1_$v" "${!f}"
	done
	last[$1]=$MM_US
}

# Each round runs the five receivers, fed alike, in an order turned by one from the round before.
receivers=(mm_copy zc_copy mm_map zc_map zc_auto)
for round in $(seq 1 "$ROUNDS"); do
	n=${#receivers[@]}
	for i in $(seq 0 $((n - 1))); do
		receive "${receivers[$(((i + round - 1) % n))]}"
	done
	pair_line "round $round copy usec per MiB" "${last[zc_copy]}" "${last[mm_copy]}"
	pair_line "round $round mapped usec per MiB" "${last[zc_map]}" "${last[mm_map]}"
	pair_line "round $round auto vs cheaper usec per MiB" "${last[zc_auto]}" \
		"$(lesser "${last[mm_copy]}" "${last[mm_map]}")"
	echo "round $round mapped/copy usec per MiB: zcnet $(ratio "${last[zc_map]}" "${last[zc_copy]}")" \
		" tcp_mmap $(ratio "${last[mm_map]}" "${last[mm_copy]}")"
done
for v in GBIT US PCT; do
	unit="Gbit/s"
	[ "$v" = US ] && unit="usec per MiB"
	[ "$v" = PCT ] && unit="% mapped"
	pair_line "mean copy $unit" "$(mean "zc_copy_$v")" "$(mean "mm_copy_$v")"
	pair_line "mean mapped $unit" "$(mean "zc_map_$v")" "$(mean "mm_map_$v")"
	pair_line "mean auto vs tcp_mmap -z $unit" "$(mean "zc_auto_$v")" "$(mean "mm_map_$v")"
done
echo "mean mapped/copy usec per MiB: zcnet $(ratio "$(mean zc_map_US)" "$(mean zc_copy_US)")" \
	" tcp_mmap $(ratio "$(mean mm_map_US)" "$(mean mm_copy_US)")"
pair_line "mean auto vs cheaper usec per MiB" "$(mean zc_auto_US)" \
	"$(lesser "$(mean mm_copy_US)" "$(mean mm_map_US)")"

# tcp_mmap's client always sends 32 GiB (FILE_SZ), without a header: counted, not verified.
port="$(free_port)"
in_netns "$ZCNET" bench rx --listen "127.0.0.1:$port" --once --mode zerocopy --interval 0 \
	--no-kernel-copies --json >"$SCRATCH/zr" &
pid=$!
sleep 0.3
in_netns "$REFS/tcp_mmap" -H 127.0.0.1 -z -M "$PAGE_MSS" -p "$port" -4 >/dev/null 2>&1
wait "$pid"
got="$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["bytes"])' "$SCRATCH/zr")"
check_equal "tcp_mmap -z -> zcnet rx --listen (bytes)" "$((1 << 35))" "$got"
netns_del
