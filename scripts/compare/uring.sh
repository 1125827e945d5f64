#!/usr/bin/env bash
# compare-references uring: zcnet's sender on its io_uring path (SendPath::IoUring, from a pool
# registered with the ring: the `uring_send` example of crates/zcnet) against the kernel's
# tools/testing/selftests/net/io_uring_zerocopy_tx.c (SEND_ZC from one registered buffer, 8 requests
# per submit, MSG_WAITALL), TCP over loopback into the same receiver (the kernel's `msg_zerocopy -r`),
# 4 KiB sends and 64 KiB ones (65435 bytes: the most the selftest sends).
#
# zcnet runs three times per round: `one` sends one frozen pool buffer over and over, lent to many
# requests at once, as the selftest sends its one buffer (the like-for-like pair); `pool` lends a
# distinct pool buffer to each send, as a stream of distinct data would. Over loopback the kernel
# copies what it delivers, and a pool's buffers in flight (a socket buffer's worth) are no longer in
# the CPU's cache: the `pool` pair shows what that costs against the selftest's hot buffer. `pool
# huge` does the same from a pool on transparent huge pages, which zcnet sends unregistered (a
# fixed send from a huge page is charged to the socket as up to the whole page).
#
# Each round runs the four senders one after the other (the order reverses every other round), and
# the selftest a second time at the far end of the round, each for $SECONDS_PER_RUN seconds, the
# receiver on one CPU and the sender on another, in one private network namespace made for the
# whole comparison (only its own loopback, no TCP metrics kept; a namespace per run would be torn
# down by the kernel while the next run measures, and rates would then swing between two levels
# almost 2x apart). Rates are MB/s (MiB per second). The selftest prints its bytes over whole
# seconds although it runs 0.2 s longer (cfg_runtime_ms = 200 + t * 1000): its rate here is its MB
# over the time it really ran.
#
# The comparison is paired by round: each zcnet run is divided by the geometric mean of the
# selftest's two runs of the same round, which bracket it in time (a shared host's rates drift by
# a quarter from one minute to the next), and each sender's line gives the median of those
# per-round ratios, then their geometric mean with a range of two standard errors either side
# (`gm A [LO-HI]`): a range that holds 1.0 does not tell the two apart. The columns beside it are
# the medians of the rates. The `control` line divides the selftest's second run by its first in
# each round: one program against itself (its spread is about 1.15x the others', a ratio of two
# single runs rather than of one run and a mean of two).
#
# Both senders' TCP runs under the namespace's congestion control, the host's default unless TCP_CC
# names another that net.ipv4.tcp_allowed_congestion_control lets a namespace choose: under bbr every
# flow is paced by a timer, and on a VM, where each timer interrupt costs, the two senders' rates
# move apart from what they are under cubic.
#
# Usage: scripts/compare-references uring, or scripts/compare/uring.sh alone
# (env: ROUNDS, default 3; SECONDS_PER_RUN, default 2; TCP_CC, default the host's).
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
		skip "needs root for a private network namespace (ip netns)"
		return 0
	fi
	refs="$(refs_build)"
	if [ ! -x "$refs/io_uring_zerocopy_tx" ] || [ ! -x "$refs/msg_zerocopy" ]; then
		skip "the reference tools did not build (see above)"
		return 0
	fi
	(cd "$REPO_ROOT" && cargo build --release -q -p zcnet --example uring_send >&2)
	uring_send="$REPO_ROOT/target/release/examples/uring_send"

	netns_add "zcnet-uring-$$"

	# With two CPUs or more, the receiver runs on CPU 1 and every sender on CPU 0 (taskset): the
	# scheduler moving them between runs adds ~6% of noise per run.
	on_rx=""
	on_tx=""
	if [ "$(nproc)" -ge 2 ]; then
		on_rx="taskset -c 1"
		on_tx="taskset -c 0"
	fi

	# with_receiver SENDER: runs the receiver, then SENDER, in the namespace; bounded, so that a tool
	# failing to start cannot leave the other waiting forever.
	with_receiver() {
		timeout $((SECONDS_PER_RUN + 20)) ip netns exec "$NETNS" bash -c \
			"$on_rx '$refs/msg_zerocopy' -4 -r -D 127.0.0.1 -p $PORT -t $((SECONDS_PER_RUN + 2)) tcp >/dev/null 2>&1 &
			sleep 0.3
			$on_tx $1
			kill %1 2>/dev/null; wait"
	}

	# reference SIZE: prints the selftest's MB/s.
	reference() {
		with_receiver "'$refs/io_uring_zerocopy_tx' -4 -D 127.0.0.1 -p $PORT -s $1 -t $SECONDS_PER_RUN tcp 2>&1" 2>&1 |
			sed -n 's/.*tx=[0-9]* (MB=\([0-9]*\)).*/\1/p' |
			awk -v s="$SECONDS_PER_RUN" '{ printf "%.1f\n", $1 / (s + 0.2) }' || true
	}

	# zcnet_rate SIZE SOURCE...: prints the MB/s of zcnet's io_uring sender sending from SOURCE (one,
	# pool, pool huge).
	zcnet_rate() {
		with_receiver "'$uring_send' 127.0.0.1:$PORT $1 $SECONDS_PER_RUN ${*:2}" 2>/dev/null |
			sed -n 's/.*MB\/s \([0-9.]*\).*/\1/p' || true
	}

	median() {
		sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
	}

	# paired_line NAME WHO RUNS [BASE]: one line for the array named RUNS against the selftest:
	# the medians of the rates (RUNS', and the selftest's over both its runs), then the median of
	# the per-round ratios, RUNS[i] / sqrt(ref[i] * again[i]) (or RUNS[i] / BASE[i] when the array
	# BASE is named), and their geometric mean with two standard errors either side. A round
	# missing a rate counts in neither.
	paired_line() {
		local -n runs="$3"
		local -n first="${4:-ref}" second="${4:-again}"
		local name="$1" who="$2" i rows=""
		for i in "${!runs[@]}"; do
			rows+="${runs[$i]} ${first[$i]} ${second[$i]}"$'\n'
		done
		local stats
		stats="$(printf '%s' "$rows" | paired_ratio)"
		printf '%-55s %s %8s  reference %8s  paired ratio %s\n' "$name" "$who" \
			"$(printf '%s\n' "${runs[@]}" | median)" "$ref_median" "$stats"
	}

	echo "io_uring zero-copy send, TCP over loopback: MB/s, median of $ROUNDS rounds of ${SECONDS_PER_RUN}s each; ratios paired by round"
	echo "TCP congestion control: $(congestion_control)"
	for size in "${SIZES[@]}"; do
		ref=()
		one=()
		pool=()
		huge=()
		again=()
		for round in $(seq 1 "$ROUNDS"); do
			if [ $((round % 2)) = 1 ]; then
				ref+=("$(reference "$size")")
				one+=("$(zcnet_rate "$size" one)")
				pool+=("$(zcnet_rate "$size" pool)")
				huge+=("$(zcnet_rate "$size" pool huge)")
				again+=("$(reference "$size")")
			else
				again+=("$(reference "$size")")
				huge+=("$(zcnet_rate "$size" pool huge)")
				pool+=("$(zcnet_rate "$size" pool)")
				one+=("$(zcnet_rate "$size" one)")
				ref+=("$(reference "$size")")
			fi
			echo "  round $round, $size-byte sends: zcnet one buffer ${one[-1]} MB/s, zcnet pool ${pool[-1]} MB/s, zcnet pool on huge pages ${huge[-1]} MB/s, io_uring_zerocopy_tx ${ref[-1]} MB/s and again ${again[-1]} MB/s"
		done
		ref_median="$(printf '%s\n' "${ref[@]}" "${again[@]}" | median)"
		paired_line "control: io_uring_zerocopy_tx $size B" again again ref
		paired_line "tcp loopback send_zc $size B, one buffer" zcnet one
		paired_line "tcp loopback send_zc $size B, zcnet pool" zcnet pool
		paired_line "tcp loopback send_zc $size B, zcnet pool on huge pages" zcnet huge
	done
	netns_del
}

uring_compare
