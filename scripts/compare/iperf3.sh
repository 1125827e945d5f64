# shellcheck shell=bash
# zcnet's iperf3 peer as the sending server beside iperf3's own, each tested by Debian's stock iperf3
# client with `-R` (the server sends, the client receives), over loopback: `zcnet iperf3 -s` in each
# mode and API (zerocopy on sendmsg, zerocopy on io_uring, copy), `iperf3 -s` for a `-Z` client (the
# server sends with sendfile) and plain `iperf3 -s`. ROUNDS rounds, the servers interleaved in each,
# IPERF3_SECONDS (default 3) per test; per server the median over rounds of the Gbit/s the client
# received (its `end.sum_received`) and of the server's CPU per 10^6 bytes received (the server
# process's utime + stime from /proc/PID/stat over the test). Every test must complete with iperf3
# exiting 0. As root in its own network namespace (own_netns).

IPERF3_SECONDS="${IPERF3_SECONDS:-3}"
refs_need_packages iperf3 >&2 || { skip "Debian's iperf3 is not installed" || return 1; return 0; }
own_netns "zcnet-iperf3-$$"
CLK_TCK="$(getconf CLK_TCK)"

# name|server command (PORT replaced)|client flags
IPERF3_SERVERS=(
	"zcnet zerocopy|$ZCNET iperf3 -s -p PORT -i 0 --mode zerocopy|"
	"zcnet zerocopy io_uring|$ZCNET iperf3 -s -p PORT -i 0 --mode zerocopy --api io_uring|"
	"zcnet copy|$ZCNET iperf3 -s -p PORT -i 0 --mode copy|"
	"iperf3 sendfile (client -Z)|iperf3 -s -p PORT -i 0|-Z"
	"iperf3|iperf3 -s -p PORT -i 0|"
)

# Clock ticks the process PID has run (user + system, all its threads).
iperf3_ticks() {
	awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

# iperf3_test NAME SERVER_COMMAND CLIENT_FLAGS: one test; prints "GBIT US_PER_MB" or fails.
iperf3_test() {
	local port pid before after bytes seconds rc=0
	port="$(free_port)"
	# Started without a wrapping shell (`ip netns exec` execs it), so that $! is the server itself.
	if [ -n "${NETNS:-}" ]; then
		# shellcheck disable=SC2086
		ip netns exec "$NETNS" ${2//PORT/$port} >"$SCRATCH/server" 2>&1 &
	else
		# shellcheck disable=SC2086
		${2//PORT/$port} >"$SCRATCH/server" 2>&1 &
	fi
	pid=$!
	for _ in $(seq 1 100); do
		in_netns ss -Hltn "sport = :$port" | grep -q . && break
		sleep 0.05
	done
	before="$(iperf3_ticks "$pid")" || { echo "iperf3 $1: the server did not start: $(tail -3 "$SCRATCH/server")" >&2; return 1; }
	# shellcheck disable=SC2086
	in_netns iperf3 -c 127.0.0.1 -p "$port" -R -t "$IPERF3_SECONDS" -J $3 >"$SCRATCH/client.json" || rc=$?
	after="$(iperf3_ticks "$pid")"
	# The server was started above: stop it by its pid.
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	if [ "$rc" -ne 0 ]; then
		echo "iperf3 $1: the client exited $rc: $(tail -3 "$SCRATCH/server")" >&2
		return 1
	fi
	read -r bytes seconds < <(python3 -c 'import json, sys
end = json.load(open(sys.argv[1]))["end"]["sum_received"]
print(end["bytes"], end["seconds"])' "$SCRATCH/client.json")
	awk -v b="$bytes" -v s="$seconds" -v t="$((after - before))" -v hz="$CLK_TCK" \
		'BEGIN { printf "%.2f %.1f\n", b * 8 / s / 1e9, t / hz * 1e6 / (b / 1e6) }'
}

iperf3_median() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A IPERF3_GBIT=() IPERF3_US=()
iperf3_status=0
for round in $(seq 1 "$ROUNDS"); do
	for entry in "${IPERF3_SERVERS[@]}"; do
		IFS='|' read -r name server flags <<<"$entry"
		if out="$(iperf3_test "$name" "$server" "$flags")"; then
			read -r gbit us <<<"$out"
			printf 'round %s  %-30s %8s Gbit/s  %8s us/MB (server CPU)\n' "$round" "$name" "$gbit" "$us"
			IPERF3_GBIT[$name]+="$gbit"$'\n'
			IPERF3_US[$name]+="$us"$'\n'
		else
			iperf3_status=1
		fi
	done
done
echo "medians of $ROUNDS rounds, iperf3 -c 127.0.0.1 -R -t $IPERF3_SECONDS:"
for entry in "${IPERF3_SERVERS[@]}"; do
	IFS='|' read -r name _ _ <<<"$entry"
	printf '%-30s %8s Gbit/s  %8s us/MB (server CPU)\n' "$name" \
		"$(printf '%s' "${IPERF3_GBIT[$name]:-}" | iperf3_median)" \
		"$(printf '%s' "${IPERF3_US[$name]:-}" | iperf3_median)"
done
netns_del
[ "$iperf3_status" -eq 0 ]
