# shellcheck shell=bash
# Shared helpers of scripts/compare-references: the kernel's reference tools, built outside git.
#
# Interface (source this file, then call):
#   refs_build            fetch Debian's linux-source-6.12 once, extract msg_zerocopy.c, tcp_mmap.c,
#                         io_uring_zerocopy_tx.c and vsock_perf.c, build them with gcc; prints the
#                         directory holding the binaries (msg_zerocopy, tcp_mmap, io_uring_zerocopy_tx,
#                         vsock_perf). Everything lives in $REFS_CACHE, never in the repository.
#   zcnet_bin             builds zcnet (release) if needed and prints the path of the binary.
#   ratio A B             prints A/B with three decimals ("-" when B is 0 or empty).
#   pair_line NAME ZC REF prints one comparison line: "NAME zcnet ZC reference REF ratio ZC/REF".
#   paired_ratio          reads lines "X A B" (one per round) and prints the median over rounds of
#                         X/sqrt(A*B) (X/A when B is A), then their geometric mean with two standard
#                         errors either side: "MEDIAN gm MEAN [LO-HI]" ("-" without a round).
#   skip REASON           prints "SKIP <comparison>: REASON" (fails instead under ZCNET_PRIV_TESTS=1).
#   free_port             prints a TCP/UDP port on 127.0.0.1 that nothing listens on now (in NETNS
#                         when one is made).
#   in_netns CMD...       runs CMD in the namespace NETNS when one is made, else on the host.
#   cpu_s FILE            user+system seconds from a file written by `/usr/bin/time -f '%U %S' -o FILE`.
#   mib_gbit MIB SECONDS  Gbit/s of MIB mebibytes in SECONDS.
#   check_equal WHAT A B  prints "interop WHAT: A = B ok" or fails the comparison.
#   each_round_and_mode F calls `F ROUND MODE FLAG` for copy ("") and zerocopy (-z) in each round.
#   bracketed_line NAME KEY ZC REF AGAIN
#                         prints a round's zcnet figure between the reference's before and after it,
#                         and keeps it under KEY for bracketed_summary.
#   bracketed_summary NAME CONTROL_NAME KEY
#                         prints the paired ratios of KEY's rounds: the reference against itself, then
#                         zcnet against the reference.
#   netns_add NAME        creates the namespace NAME (NETNS) with its loopback up, TCP metrics not
#                         saved, under the TCP congestion control TCP_CC (env) when set and allowed.
#   own_netns NAME        as root, netns_add NAME; otherwise says the comparison runs over the
#                         host's loopback.
#   congestion_control    prints the TCP congestion control of NETNS (or the host's), and whether it paces.
#   ROUNDS                rounds per comparison (env, default 3).
#
# The sources come from Debian's package with the ordinary apt client; their code is never copied into
# zcnet, and neither they nor their binaries are committed.

set -euo pipefail

REFS_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/zcnet/references"
REFS_PACKAGE="linux-source-6.12"
ROUNDS="${ROUNDS:-3}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# Installs Debian packages that are missing (needs root).
refs_need_packages() {
	local missing=()
	local p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		echo "compare-references: missing packages ${missing[*]} (install them as root)" >&2
		return 1
	fi
	echo "compare-references: installing ${missing[*]}" >&2
	apt-get update -qq >&2 || true
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

refs_build() {
	mkdir -p "$REFS_CACHE"
	refs_need_packages gcc libc6-dev libssl-dev xz-utils time >&2
	(
		flock 9
		cd "$REFS_CACHE"
		if [ ! -f src/.extracted ]; then
			if ! ls ./"${REFS_PACKAGE}"_*.deb >/dev/null 2>&1; then
				echo "compare-references: downloading $REFS_PACKAGE (~150 MB, once)" >&2
				apt-get download "$REFS_PACKAGE" >&2
			fi
			rm -rf src pkg && mkdir -p src pkg
			dpkg-deb --fsys-tarfile ./"${REFS_PACKAGE}"_*.deb |
				tar -x -C pkg --wildcards './usr/src/linux-source-*.tar.xz'
			tar -xJf pkg/usr/src/linux-source-*.tar.xz -C src --strip-components=1 \
				--wildcards \
				'*/tools/testing/selftests/net/msg_zerocopy.c' \
				'*/tools/testing/selftests/net/tcp_mmap.c' \
				'*/tools/testing/selftests/net/io_uring_zerocopy_tx.c' \
				'*/tools/testing/vsock/vsock_perf.c' \
				'*/tools/testing/vsock/msg_zerocopy_common.h' \
				'*/tools/testing/vsock/msg_zerocopy_common.c' \
				'*/tools/include/io_uring/mini_liburing.h' \
				'*/include/uapi/linux/io_uring.h'
			rm -rf pkg
			touch src/.extracted
		fi
		mkdir -p bin
		local net=src/tools/testing/selftests/net
		[ -x bin/msg_zerocopy ] || gcc -O2 -Wall -o bin/msg_zerocopy "$net/msg_zerocopy.c" >&2
		[ -x bin/tcp_mmap ] || gcc -O2 -Wall -o bin/tcp_mmap "$net/tcp_mmap.c" -lpthread -lcrypto >&2
		[ -x bin/io_uring_zerocopy_tx ] ||
			gcc -O2 -Wall -I src/tools/include -I src/include/uapi -o bin/io_uring_zerocopy_tx "$net/io_uring_zerocopy_tx.c" >&2 ||
			echo "compare-references: io_uring_zerocopy_tx did not build" >&2
		[ -x bin/vsock_perf ] ||
			gcc -O2 -Wall -D_GNU_SOURCE -o bin/vsock_perf src/tools/testing/vsock/vsock_perf.c \
				src/tools/testing/vsock/msg_zerocopy_common.c >&2 ||
			echo "compare-references: vsock_perf did not build" >&2
	) 9>"$REFS_CACHE/.lock"
	echo "$REFS_CACHE/bin"
}

zcnet_bin() {
	(cd "$REPO_ROOT" && cargo build --release -q -p zcnet-cli >&2)
	echo "$REPO_ROOT/target/release/zcnet"
}

ratio() {
	awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (b == "" || b + 0 == 0) print "-"; else printf "%.3f\n", a / b }'
}

pair_line() {
	printf '%-44s zcnet %12s  reference %12s  ratio %s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"
}

paired_ratio() {
	awk '$1 > 0 && $2 > 0 && $3 > 0 { printf "%.9f\n", log($1 / sqrt($2 * $3)) }' |
		sort -g | awk '
			{ l[NR] = $1; s += $1 }
			END {
				if (NR == 0) { print "-"; exit }
				m = s / NR
				for (i = 1; i <= NR; i++) q += (l[i] - m) ^ 2
				se = NR > 1 ? sqrt(q / (NR - 1) / NR) : 0
				med = NR % 2 ? l[(NR + 1) / 2] : (l[NR / 2] + l[NR / 2 + 1]) / 2
				printf "%.3f gm %.3f [%.3f-%.3f]\n", exp(med), exp(m), exp(m - 2 * se), exp(m + 2 * se)
			}'
}

skip() {
	if [ "${ZCNET_PRIV_TESTS:-}" = 1 ]; then
		echo "FAIL ${COMPARISON:-compare}: $1" >&2
		return 1
	fi
	echo "SKIP ${COMPARISON:-compare}: $1"
}

free_port() {
	in_netns python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

in_netns() {
	if [ -n "${NETNS:-}" ]; then
		ip netns exec "$NETNS" "$@"
	else
		"$@"
	fi
}

cpu_s() {
	awk '{ print $1 + $2 }' "$1"
}

mib_gbit() {
	awk -v m="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.3f\n", m * 1048576 * 8 / s / 1e9; else print 0 }'
}

check_equal() {
	if [ "$2" = "$3" ]; then
		echo "interop $1: $2 = $3 ok"
	else
		echo "interop $1: $2 != $3 FAILED"
		INTEROP_FAILED=1
	fi
}

# each_round_and_mode ROUND_FN: over $ROUNDS rounds, zcnet's copy mode against msg_zerocopy plain
# and its zerocopy mode against msg_zerocopy -z: calls `ROUND_FN ROUND MODE FLAG` (FLAG "" or -z),
# which runs and reports one bracketed pair.
each_round_and_mode() {
	local round
	for round in $(seq 1 "$ROUNDS"); do
		"$1" "$round" copy ""
		"$1" "$round" zerocopy -z
	done
}

# Per-round triples of the bracketed comparisons (tcp, udp), by comparison and key, one line per
# round for paired_ratio: "ZC REF AGAIN" under KEY, and "AGAIN REF REF" (the reference against
# itself) under control_KEY.
declare -A BRACKETED=()

# bracketed_line NAME KEY ZC REF AGAIN: prints one round's line (zcnet's figure, and the
# reference's just before and just after it) and keeps the round under KEY.
bracketed_line() {
	printf '%-44s zcnet %12s  reference %12s and %s\n' "$1" "$3" "$4" "$5"
	BRACKETED[${COMPARISON}_$2]+="$3 $4 $5"$'\n'
	BRACKETED[${COMPARISON}_control_$2]+="$5 $4 $4"$'\n'
}

# bracketed_summary NAME CONTROL_NAME KEY: the paired ratios of the rounds kept under KEY: the
# reference against itself (CONTROL_NAME), then zcnet against the reference (NAME).
bracketed_summary() {
	printf '%-44s paired ratio %s\n' "$2" \
		"$(printf '%s' "${BRACKETED[${COMPARISON}_control_$3]:-}" | paired_ratio)"
	printf '%-44s paired ratio %s\n' "$1" "$(printf '%s' "${BRACKETED[${COMPARISON}_$3]:-}" | paired_ratio)"
}

# A scratch directory removed when the script exits, and a network namespace a comparison may make
# (netns_add), removed then too.
SCRATCH="$(mktemp -d)"
NETNS=""
trap 'rm -rf "$SCRATCH"; [ -z "$NETNS" ] || ip netns del "$NETNS" 2>/dev/null || true' EXIT

# netns_add NAME: a network namespace with its loopback up, in $NETNS until netns_del. TCP keeps
# no metrics there (net.ipv4.tcp_no_metrics_save): otherwise each connection to 127.0.0.1 starts
# from what the previous run's connection left in the cache (after a selftest run: rtt 4751us,
# rttvar 9444us, cwnd 11, reordering 5), so that every run would inherit from the one before it.
netns_add() {
	ip netns add "$1"
	NETNS="$1"
	ip -n "$NETNS" link set lo up
	ip netns exec "$NETNS" sysctl -q -w net.ipv4.tcp_no_metrics_save=1
	if [ -n "${TCP_CC:-}" ] &&
		! ip netns exec "$NETNS" sysctl -q -w "net.ipv4.tcp_congestion_control=$TCP_CC" 2>/dev/null; then
		echo "TCP_CC=$TCP_CC: a namespace may use only what net.ipv4.tcp_allowed_congestion_control" \
			"lists ($(sysctl -n net.ipv4.tcp_allowed_congestion_control)); keeping" \
			"$(ip netns exec "$NETNS" sysctl -n net.ipv4.tcp_congestion_control)" >&2
	fi
}

own_netns() {
	if [ "$(id -u)" -eq 0 ]; then
		netns_add "$1"
	else
		echo "not root: over the host's loopback, whose TCP metrics carry from one run to the next"
	fi
}

# Prints the TCP congestion control of the namespace NETNS (the host's when empty), and whether it paces.
congestion_control() {
	local cc
	if [ -n "${NETNS:-}" ]; then
		cc="$(ip netns exec "$NETNS" sysctl -n net.ipv4.tcp_congestion_control)"
	else
		cc="$(sysctl -n net.ipv4.tcp_congestion_control)"
	fi
	case "$cc" in
	bbr*) echo "$cc (paces every flow with a timer: rates and ratios differ from an unpaced one's)" ;;
	*) echo "$cc" ;;
	esac
}

netns_del() {
	[ -n "$NETNS" ] || return 0
	ip netns del "$NETNS"
	NETNS=""
}
INTEROP_FAILED=0
