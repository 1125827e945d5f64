#!/usr/bin/env bash
# compare-references uring: zcnet's io_uring zero-copy sender (zcnet::uring, SEND_ZC from a registered
# pool) against the kernel's tools/testing/selftests/net/io_uring_zerocopy_tx.c (SEND_ZC from one
# registered buffer, 8 requests per submit, MSG_WAITALL), TCP over loopback, 4 KiB sends and 64 KiB
# ones (65475 bytes: the most the selftest sends, 65535 less IPv6 and TCP headers).
#
# Each round runs both senders one after the other (the order alternates between rounds) inside a
# private network namespace (`unshare -n`, only its own loopback), each for $SECONDS_PER_RUN seconds, and
# the medians of the rounds are compared. The receiver is the kernel's `msg_zerocopy -r` for the
# reference, and for zcnet too when its bench can send to a foreign receiver (`--connect … --raw`);
# otherwise zcnet's bench uses its own receiver, and the output says so.
#
# Rates are MB/s (MiB per second). The selftest prints bytes over its whole seconds although it runs
# 0.2 s longer (cfg_runtime_ms = 200 + t * 1000); its rate here is its MB over the time it really ran.
#
# Usage: scripts/compare/uring.sh            (env: ROUNDS, default 3; SECONDS_PER_RUN, default 2)
set -euo pipefail
COMPARISON=uring
# shellcheck source=scripts/compare/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SECONDS_PER_RUN="${SECONDS_PER_RUN:-2}"
SIZES=(4096 65475)
PORT=8017

if [ "$(id -u)" -ne 0 ]; then
	skip "needs root for a private network namespace (unshare -n)"
	exit 0
fi
refs="$(refs_build)"
if [ ! -x "$refs/io_uring_zerocopy_tx" ] || [ ! -x "$refs/msg_zerocopy" ]; then
	skip "the reference tools did not build (see above)"
	exit 0
fi
zcnet="$(zcnet_bin)"
if "$zcnet" bench tcp --help | grep -q -- '--raw'; then
	foreign_receiver=1
else
	foreign_receiver=0
	echo "note: this zcnet bench has no --connect/--raw: zcnet's rows use its own receiver"
fi

# in_netns CMD: runs CMD (a bash snippet) in a fresh network namespace with loopback up.
# Bounded, so that a tool failing to start cannot leave the other waiting forever.
in_netns() {
	timeout $((SECONDS_PER_RUN + 20)) unshare -n bash -c "ip link set lo up && $1"
}

# reference SIZE: prints the selftest's MB/s.
reference() {
	local out
	out="$(in_netns "'$refs/msg_zerocopy' -4 -r -D 127.0.0.1 -p $PORT -t $((SECONDS_PER_RUN + 2)) tcp >/dev/null 2>&1 &
		sleep 0.3
		'$refs/io_uring_zerocopy_tx' -4 -D 127.0.0.1 -p $PORT -s $1 -t $SECONDS_PER_RUN tcp 2>&1
		kill %1 2>/dev/null; wait" 2>&1 || true)"
	echo "$out" | sed -n 's/.*tx=[0-9]* (MB=\([0-9]*\)).*/\1/p' |
		awk -v s="$SECONDS_PER_RUN" '{ printf "%.1f\n", $1 / (s + 0.2) }'
}

# zcnet SIZE: prints zcnet's io_uring sender's MB/s.
zcnet_rate() {
	local bench="'$zcnet' bench tcp --api io_uring --mode zerocopy --size $1 --duration $SECONDS_PER_RUN --json"
	local out
	if [ "$foreign_receiver" = 1 ]; then
		out="$(in_netns "'$refs/msg_zerocopy' -4 -r -D 127.0.0.1 -p $PORT -t $((SECONDS_PER_RUN + 3)) tcp >/dev/null 2>&1 &
			sleep 0.3
			$bench --connect 127.0.0.1:$PORT --raw
			kill %1 2>/dev/null; wait" 2>/dev/null || true)"
	else
		out="$(in_netns "$bench" || true)"
	fi
	echo "$out" | grep -o '"gbit_per_s":[0-9.e+-]*' | head -1 | cut -d: -f2 |
		awk '{ printf "%.1f\n", $1 * 1e9 / 8 / 1048576 }'
}

median() {
	sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "io_uring zero-copy send, TCP over loopback: MB/s, median of $ROUNDS rounds of ${SECONDS_PER_RUN}s each"
for size in "${SIZES[@]}"; do
	zc=()
	ref=()
	for round in $(seq 1 "$ROUNDS"); do
		if [ $((round % 2)) = 1 ]; then
			ref+=("$(reference "$size")")
			zc+=("$(zcnet_rate "$size")")
		else
			zc+=("$(zcnet_rate "$size")")
			ref+=("$(reference "$size")")
		fi
		echo "  round $round, $size-byte sends: zcnet ${zc[-1]} MB/s, io_uring_zerocopy_tx ${ref[-1]} MB/s"
	done
	pair_line "tcp loopback send_zc $size B (MB/s)" \
		"$(printf '%s\n' "${zc[@]}" | median)" "$(printf '%s\n' "${ref[@]}" | median)"
done
