# shellcheck shell=bash
# vsock_perf against zcnet bench vsock needs a vsock transport between two ends this project owns.
# On the host there is none (no vsock_loopback: a bind to CID 1 gives EADDRNOTAVAIL), and the host's
# CID 1 and 2 are never connected to. The guest suite (`vm/run-suite vsock`) runs zcnet bench vsock
# over vsock_loopback instead, where timings are emulated and only correctness counts.

skip "no vsock transport on this host; vm/run-suite vsock runs zcnet bench vsock in the guest"
