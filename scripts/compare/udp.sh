# shellcheck shell=bash
# zcnet bench udp --connect --raw against msg_zerocopy's UDP sender, both into `msg_zerocopy -r udp`
# (which checks every datagram's length and first bytes against its own pattern, the one zcnet
# sends), UDP_SIZE-byte datagrams for SECONDS_UDP: plain against --mode copy, -z against
# --mode zerocopy. Datagrams received are the throughput; sender CPU per MB the cost. As root in
# its own network namespace (own_netns), as tcp.sh, and like it each round runs, per mode,
# msg_zerocopy, zcnet, then msg_zerocopy again: zcnet's run is divided by the geometric mean of
# the two around it, and a `control` line divides msg_zerocopy's second run by its first.

SECONDS_UDP="${SECONDS_UDP:-2}"
UDP_SIZE="${UDP_SIZE:-1400}"
UDP_DURATION="$(awk -v t="$SECONDS_UDP" 'BEGIN { print t + 0.2 }')"
own_netns "zcnet-udp-$$"

udp_receiver() {
	PORT="$(free_port)"
	in_netns "$REFS/msg_zerocopy" -4 -r -s "$UDP_SIZE" -t "$SECONDS_UDP" -p "$PORT" -D 127.0.0.1 udp \
		2>"$SCRATCH/rx" &
	RX_PID=$!
	sleep 0.3
}

# Waits for the receiver; sets RX_PACKETS (fails the comparison if it rejected a datagram).
udp_received() {
	if ! wait "$RX_PID"; then
		echo "msg_zerocopy -r udp rejected the stream: $(tail -1 "$SCRATCH/rx")"
		INTEROP_FAILED=1
	fi
	RX_PACKETS="$(sed -n 's/^rx=\([0-9]*\) .*/\1/p' "$SCRATCH/rx")"
}

ref_udp() {
	udp_receiver
	in_netns /usr/bin/time -f '%U %S' -o "$SCRATCH/cpu" "$REFS/msg_zerocopy" -4 $1 -s "$UDP_SIZE" \
		-t "$SECONDS_UDP" -p "$PORT" -D 127.0.0.1 -S 127.0.0.1 udp 2>/dev/null >/dev/null
	udp_received
	REF_PACKETS="$RX_PACKETS"
	REF_CPU="$(cpu_s "$SCRATCH/cpu")"
}

zc_udp() {
	udp_receiver
	in_netns /usr/bin/time -f '%U %S' -o "$SCRATCH/cpu" "$ZCNET" bench udp --connect "127.0.0.1:$PORT" \
		--raw --mode "$1" --size "$UDP_SIZE" --duration "$UDP_DURATION" --interval 0 --json \
		>"$SCRATCH/zc"
	udp_received
	ZC_PACKETS="$RX_PACKETS"
	ZC_CPU="$(cpu_s "$SCRATCH/cpu")"
}

us_per_datagram_mb() {
	awk -v c="$1" -v p="$2" -v s="$UDP_SIZE" 'BEGIN { if (p > 0) printf "%.1f\n", c * 1e6 / (p * s / 1e6); else print 0 }'
}

# udp_round ROUND MODE FLAG: msg_zerocopy FLAG, zcnet MODE, msg_zerocopy FLAG again; prints the
# round's lines.
udp_round() {
	local zc_us ref_us again_us ref_packets
	ref_udp "$3"
	ref_packets="$REF_PACKETS"
	ref_us="$(us_per_datagram_mb "$REF_CPU" "$REF_PACKETS")"
	zc_udp "$2"
	ref_udp "$3"
	zc_us="$(us_per_datagram_mb "$ZC_CPU" "$ZC_PACKETS")"
	again_us="$(us_per_datagram_mb "$REF_CPU" "$REF_PACKETS")"
	bracketed_line "round $1 $2 vs msg_zerocopy ${3:-plain}: datagrams" "datagrams_$2" \
		"$ZC_PACKETS" "$ref_packets" "$REF_PACKETS"
	bracketed_line "round $1 $2 vs msg_zerocopy ${3:-plain}: us/MB received" "us_$2" \
		"$zc_us" "$ref_us" "$again_us"
}

each_round_and_mode udp_round
for pair in "copy:plain" "zerocopy:-z"; do
	for what in "datagrams:datagrams" "us:us/MB received"; do
		bracketed_summary "$ROUNDS rounds ${pair%%:*} vs msg_zerocopy ${pair#*:}: ${what#*:}" \
			"control: msg_zerocopy ${pair#*:} again: ${what#*:}" "${what%%:*}_${pair%%:*}"
	done
done
netns_del
