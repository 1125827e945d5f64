# shellcheck shell=bash
# zcnet bench tcp --connect --raw against msg_zerocopy's TCP sender, both into the same receiver
# (`msg_zerocopy -r`, which discards with MSG_TRUNC), plain against --mode copy and -z against
# --mode zerocopy, 65435-byte sends (msg_zerocopy's default) for SECONDS. The receiver's MiB count is
# the throughput; the sender's user+system time per MB is its cost. Also checks zcnet's byte count
# against the receiver's, and msg_zerocopy -z into zcnet's receiver.
#
# Each round runs, per mode, msg_zerocopy, then zcnet, then msg_zerocopy again: zcnet's run is
# divided by the geometric mean of the two that bracket it in time (on a shared host a run's rate
# moves by a quarter from one minute to the next, and a drift then weighs on both sides alike), and
# a `control` line divides msg_zerocopy's second run by its first, one program against itself:
# what one round cannot tell apart. After the rounds, the `all rounds` lines divide the sums over
# the rounds (msg_zerocopy's two runs counting half each), and the `paired ratio` lines give the
# median of the per-round ratios and their geometric mean with two standard errors either side
# (paired_ratio): a range that holds 1.0 does not tell the two apart.
#
# As root everything runs in one private network namespace (netns_add: only its own loopback, and
# no TCP metrics carried from one run's connection to the next, where the host's cache held
# `127.0.0.1 cwnd 15 reordering 106 rtt 1623us` after earlier runs); otherwise on the host's
# loopback, as it says.

SECONDS_TCP="${SECONDS_TCP:-2}"
own_netns "zcnet-tcp-$$"
# msg_zerocopy -t N sends for N seconds plus 200 ms.
ZC_DURATION="$(awk -v t="$SECONDS_TCP" 'BEGIN { print t + 0.2 }')"

# Starts `msg_zerocopy -r` on a fresh port; sets PORT and RX_PID.
tcp_receiver() {
	PORT="$(free_port)"
	in_netns "$REFS/msg_zerocopy" -4 -r -t "$SECONDS_TCP" -p "$PORT" -D 127.0.0.1 tcp 2>"$SCRATCH/rx" &
	RX_PID=$!
	sleep 0.3
}

# Waits for the receiver to end; sets RX_MIB to its count.
tcp_received_mib() {
	wait "$RX_PID"
	RX_MIB="$(sed -n 's/^rx=[0-9]* (\([0-9]*\) MB)$/\1/p' "$SCRATCH/rx")"
}

# ref_tcp FLAG: msg_zerocopy's sender (FLAG "" or -z); sets REF_MIB and REF_CPU.
ref_tcp() {
	tcp_receiver
	in_netns /usr/bin/time -f '%U %S' -o "$SCRATCH/cpu" \
		"$REFS/msg_zerocopy" -4 $1 -t "$SECONDS_TCP" -p "$PORT" -D 127.0.0.1 -S 127.0.0.1 tcp \
		2>"$SCRATCH/tx" >/dev/null
	tcp_received_mib
	REF_MIB="$RX_MIB"
	REF_CPU="$(cpu_s "$SCRATCH/cpu")"
}

# zc_tcp MODE: zcnet's sender; sets ZC_MIB, ZC_CPU and ZC_SENT (bytes).
zc_tcp() {
	tcp_receiver
	in_netns /usr/bin/time -f '%U %S' -o "$SCRATCH/cpu" \
		"$ZCNET" bench tcp --connect "127.0.0.1:$PORT" --raw --mode "$1" --size 65435 \
		--duration "$ZC_DURATION" --no-verify --interval 0 --json >"$SCRATCH/zc"
	tcp_received_mib
	ZC_MIB="$RX_MIB"
	ZC_CPU="$(cpu_s "$SCRATCH/cpu")"
	ZC_SENT="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["bytes"])' "$SCRATCH/zc")"
}

us_per_mb() {
	awk -v c="$1" -v m="$2" 'BEGIN { if (m > 0) printf "%.1f\n", c * 1e6 / (m * 1.048576); else print 0 }'
}

declare -A total=()
add() { total[$1]=$(awk -v a="${total[$1]:-0}" -v b="$2" 'BEGIN { print a + b }'); }
# half_sum A B: (A + B) / 2 (an empty one counts 0).
half_sum() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + b) / 2 }'; }
# tcp_round ROUND MODE FLAG: msg_zerocopy FLAG, zcnet MODE, msg_zerocopy FLAG again; prints the
# round's lines and adds them to the totals.
tcp_round() {
	local zc_us ref_us again_us ref_mib ref_cpu
	ref_tcp "$3"
	ref_mib="$REF_MIB"
	ref_cpu="$REF_CPU"
	zc_tcp "$2"
	ref_tcp "$3"
	zc_us="$(us_per_mb "$ZC_CPU" "$ZC_MIB")"
	ref_us="$(us_per_mb "$ref_cpu" "$ref_mib")"
	again_us="$(us_per_mb "$REF_CPU" "$REF_MIB")"
	bracketed_line "round $1 $2 vs msg_zerocopy ${3:-plain}: MiB" "mib_$2" "$ZC_MIB" "$ref_mib" "$REF_MIB"
	bracketed_line "round $1 $2 vs msg_zerocopy ${3:-plain}: us/MB" "us_$2" "$zc_us" "$ref_us" "$again_us"
	check_equal "zcnet --mode $2 -> msg_zerocopy -r (MiB)" "$((ZC_SENT >> 20))" "$ZC_MIB"
	add "zc_mib_$2" "$ZC_MIB"
	add "zc_cpu_$2" "$ZC_CPU"
	add "ref_mib_$2" "$(half_sum "$ref_mib" "$REF_MIB")"
	add "ref_cpu_$2" "$(half_sum "$ref_cpu" "$REF_CPU")"
}

each_round_and_mode tcp_round
for pair in "copy:plain" "zerocopy:-z"; do
	mode="${pair%%:*}"
	pair_line "all rounds $mode vs msg_zerocopy ${pair#*:}: MiB" "${total[zc_mib_$mode]}" "${total[ref_mib_$mode]}"
	pair_line "all rounds $mode vs msg_zerocopy ${pair#*:}: us/MB" \
		"$(us_per_mb "${total[zc_cpu_$mode]}" "${total[zc_mib_$mode]}")" \
		"$(us_per_mb "${total[ref_cpu_$mode]}" "${total[ref_mib_$mode]}")"
	for what in mib:MiB us:us/MB; do
		bracketed_summary "$ROUNDS rounds $mode vs msg_zerocopy ${pair#*:}: ${what#*:}" \
			"control: msg_zerocopy ${pair#*:} again: ${what#*:}" "${what%%:*}_$mode"
	done
done

# msg_zerocopy -z into zcnet's receiver (a foreign stream: counted, not verified).
PORT="$(free_port)"
in_netns "$ZCNET" bench tcp --listen "127.0.0.1:$PORT" --once --json --interval 0 >"$SCRATCH/zl" &
ZL_PID=$!
sleep 0.3
in_netns "$REFS/msg_zerocopy" -4 -z -t 1 -p "$PORT" -D 127.0.0.1 -S 127.0.0.1 tcp 2>"$SCRATCH/tx" >/dev/null
wait "$ZL_PID"
sent_mib="$(sed -n 's/^tx=[0-9]* (\([0-9]*\) MB).*/\1/p' "$SCRATCH/tx")"
got="$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["bytes"])' "$SCRATCH/zl")"
check_equal "msg_zerocopy -z -> zcnet bench tcp --listen (MiB)" "$sent_mib" "$((got >> 20))"
netns_del
