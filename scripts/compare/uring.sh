#!/usr/bin/env bash
# compare-references uring: zcnet's io_uring zero-copy sender (zcnet::uring, from a registered pool:
# the `uring_send` example of crates/zcnet) against the kernel's
# tools/testing/selftests/net/io_uring_zerocopy_tx.c (SEND_ZC from one registered buffer, 8 requests
# per submit, MSG_WAITALL), TCP over loopback into the same receiver (the kernel's `msg_zerocopy -r`),
# 4 KiB sends and 64 KiB ones (65435 bytes: the most the selftest sends).
#
# Each round runs both senders one after the other (the order alternates between rounds) inside a
# private network namespace (`unshare -n`, only its own loopback), each for $SECONDS_PER_RUN seconds;
# the medians of the rounds are compared. Rates are MB/s (MiB per second). The selftest prints its
# bytes over whole seconds although it runs 0.2 s longer (cfg_runtime_ms = 200 + t * 1000): its rate
# here is its MB over the time it really ran.
#
# Usage: scripts/compare-references uring, or scripts/compare/uring.sh alone
# (env: ROUNDS, default 3; SECONDS_PER_RUN, default 2).
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	COMPARISON=uring
	# shellcheck source=scripts/compare/lib.sh
	source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fi

SECONDS_PER_RUN="${SECONDS_PER_RUN:-2}"
SIZES=(4096 65435)
PORT=8017

uring_compare() {
	if [ "$(id -u)" -ne 0 ]; then
		skip "needs root for a private network namespace (unshare -n)"
		return 0
	fi
	refs="$(refs_build)"
	if [ ! -x "$refs/io_uring_zerocopy_tx" ] || [ ! -x "$refs/msg_zerocopy" ]; then
		skip "the reference tools did not build (see above)"
		return 0
	fi
	(cd "$REPO_ROOT" && cargo build --release -q -p zcnet --example uring_send >&2)
	uring_send="$REPO_ROOT/target/release/examples/uring_send"

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

	# zcnet SIZE: prints the MB/s of zcnet's io_uring sender.
	zcnet_rate() {
		in_netns "'$refs/msg_zerocopy' -4 -r -D 127.0.0.1 -p $PORT -t $((SECONDS_PER_RUN + 2)) tcp >/dev/null 2>&1 &
			sleep 0.3
			'$uring_send' 127.0.0.1:$PORT $1 $SECONDS_PER_RUN
			kill %1 2>/dev/null; wait" 2>/dev/null | sed -n 's/.*MB\/s \([0-9.]*\).*/\1/p' || true
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
}

uring_compare
