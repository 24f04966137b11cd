# shellcheck shell=bash
# The softroce-vm container check, sourced by guest-init.sh after guest-checks.sh (whose helpers
# it uses: result, show, why, wait_listening, wait_pid, counter, expect_session, next_port).
#
# The roce image (made on the host by scripts/container-test.sh, an OCI layout at /opt/oci) runs
# under podman with the flags docs/containers.md tells users to use:
#   --network host --device /dev/infiniband/uverbsN --device /dev/infiniband/rdma_cm
#   --cap-add IPC_LOCK --ulimit memlock=-1 (and RDMA_CONTAINER_STRICT=1, --transport verbs)
# "Host network" is the namespace of each end (nsA, nsB): podman runs under `ip netns exec`, so
# --network host is literally that namespace, as on a real host.

IMAGE=localhost/rdma-container:vm
# One container start costs 2-10 s under TCG (podman, runc), more on a loaded host.
T_CTR=120

# Mounts what podman needs on the initramfs root: the cgroup2 hierarchy (with the controllers
# the runtime sets limits through) and tmpfs for its storage.
container_setup() {
	mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup || return 1
	echo "+cpu +memory +pids +io" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
	mount -t tmpfs tmpfs /var/lib/containers && mount -t tmpfs tmpfs /var/tmp
}

# The uverbsN node of an RDMA device (class/infiniband_verbs/uverbsN/ibdev names it).
uverbs_of() { # ibdev
	local d v
	for d in /sys/class/infiniband_verbs/uverbs*; do
		read -r v <"$d/ibdev" 2>/dev/null || continue
		[ "$v" = "$1" ] && { echo "/dev/infiniband/${d##*/}"; return 0; }
	done
	return 1
}

# podman run in namespace NS ("host network" = that namespace). `ip netns exec` mounts a fresh
# /sys, so the cgroup2 hierarchy is mounted again inside.
ctr_run() { # ns podman-run-args...
	local ns=$1
	shift
	# shellcheck disable=SC2016 # expanded by the inner shell
	ip netns exec "$ns" bash -c 'mount -t cgroup2 none /sys/fs/cgroup 2>/dev/null; exec podman run --rm "$@"' \
		sh "$@"
}

# A server container in $NS_B and a client container in $NS_A (each with its own flags, then
# --), the client sending COUNT messages. Output in /tmp/NAME.{server,client}.{out,err}; sets
# CTR_FAIL on failure.
ctr_session() { # name count server-flags... -- client-flags...
	local name=$1 count=$2 spid server_rc client_rc
	shift 2
	local sflags=() cflags=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do sflags+=("$1"); shift; done
	shift
	cflags=("$@")
	next_port
	SERVER_OUT=/tmp/$name.server.out SERVER_ERR=/tmp/$name.server.err
	CLIENT_OUT=/tmp/$name.client.out CLIENT_ERR=/tmp/$name.client.err
	CTR_FAIL=""
	snapshot_counters "/tmp/$name.counters"
	timeout "$T_CTR" bash -c 'ctr_run "$@"' sh "$NS_B" --network host "${sflags[@]}" "$IMAGE" \
		--server "$IP_B:$PORT" --once --transport verbs >"$SERVER_OUT" 2>"$SERVER_ERR" &
	spid=$!
	if ! wait_listening "$NS_B" "$PORT" "$spid"; then
		wait_pid "$spid" 1
		show "$SERVER_ERR"
		CTR_FAIL="server container did not start ($(status_text "$WAIT_RC" 1)): $(why "$SERVER_ERR")"
		return 1
	fi
	timeout "$T_CTR" bash -c 'ctr_run "$@"' sh "$NS_A" --network host "${cflags[@]}" "$IMAGE" \
		--client "$IP_B:$PORT" --count "$count" --transport verbs >"$CLIENT_OUT" 2>"$CLIENT_ERR"
	client_rc=$?
	wait_pid "$spid" "$T_STEP"
	server_rc=$WAIT_RC
	show "$SERVER_ERR" "$CLIENT_ERR"
	if [ "$server_rc" != 0 ] || [ "$client_rc" != 0 ]; then
		CTR_FAIL="server $(status_text "$server_rc" "$T_STEP"), client $(status_text "$client_rc" "$T_CTR"): $(why "$SERVER_ERR" "$CLIENT_ERR")"
		return 1
	fi
	if ! seq 0 $((count - 1)) | cmp -s - "$SERVER_OUT"; then
		CTR_FAIL="server stdout ($(wc -l <"$SERVER_OUT") lines) differs from seq 0 $((count - 1))"
		return 1
	fi
	counter_deltas "/tmp/$name.counters"
	if [ -n "$COUNTER_ERRORS" ]; then
		CTR_FAIL="rxe error counters moved during the session: $COUNTER_ERRORS"
		return 1
	fi
}

check_container() {
	# the image is the roce flavour: the container check runs verbs whatever --transport says
	# shellcheck disable=SC2034 # read by expect_session (dynamic scope)
	local TRANSPORT=verbs
	local t0 dev_a dev_b flags_a flags_b sent0 rcvd0 sent rcvd a b
	if ! container_setup; then
		result container_load FAIL "cannot mount cgroup2 and tmpfs for podman"
		return
	fi
	export -f ctr_run
	export NS_A NS_B

	# the image, from the OCI layout the host made
	t0=$(uptime_s)
	local id
	if timeout 300 podman pull -q oci:/opt/oci:rdma-container >/tmp/ctr_pull.out 2>&1 &&
		id=$(tail -n 1 /tmp/ctr_pull.out) && podman tag "$id" "$IMAGE" >/tmp/ctr_tag.out 2>&1; then
		local loaded
		loaded="podman $(podman --version | awk '{ print $3 }') loaded $IMAGE in $(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN { printf "%.1f", b - a }')s: $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.1f MB", $1 / 1e6 }')"
	else
		show /tmp/ctr_pull.out /tmp/ctr_tag.out
		result container_load FAIL "podman could not load the image: $(why /tmp/ctr_pull.out /tmp/ctr_tag.out)"
		return
	fi

	dev_a=$(uverbs_of "$RXE_A") dev_b=$(uverbs_of "$RXE_B")
	say "container: $RXE_A = $dev_a, $RXE_B = $dev_b"
	# What the entrypoint's checks cost here (two rxe devices: 2,048 GID files), timed inside
	# the container; a measurement, not a verdict (tests/packaging_scripts.rs holds the rule).
	ctr_run "$NS_B" --network host --device "$dev_b" --device /dev/infiniband/rdma_cm --cap-add IPC_LOCK \
		--entrypoint /bin/bash "$IMAGE" \
		-c 'TIMEFORMAT=%R; time /usr/local/bin/rdma-container-entrypoint.sh --version >/dev/null 2>&1' \
		>/dev/null 2>/tmp/ctr_entrypoint.time
	result container_load PASS "$loaded; the entrypoint's checks took $(tail -n 1 /tmp/ctr_entrypoint.time)s"
	flags_a=(--device "$dev_a" --device /dev/infiniband/rdma_cm --cap-add IPC_LOCK --ulimit memlock=-1:-1
		-e RDMA_CONTAINER_STRICT=1 -e RUST_LOG=info)
	flags_b=(--device "$dev_b" --device /dev/infiniband/rdma_cm --cap-add IPC_LOCK --ulimit memlock=-1:-1
		-e RDMA_CONTAINER_STRICT=1 -e RUST_LOG=info)

	# 1. the documented flags, strict, verbs: 10,000 messages over rxe
	sent0=$(counter "$RXE_A" sent_pkts) rcvd0=$(counter "$RXE_B" rcvd_pkts)
	t0=$(uptime_s)
	if ! ctr_session container_session 10000 "${flags_b[@]}" -- "${flags_a[@]}"; then
		result container_session FAIL "$CTR_FAIL"
	else
		sent=$(($(counter "$RXE_A" sent_pkts) - sent0)) rcvd=$(($(counter "$RXE_B" rcvd_pkts) - rcvd0))
		if ! a=$(expect_session "$SERVER_ERR" "$RXE_B" "$IDX_B" "$GID_B") ||
			! b=$(expect_session "$CLIENT_ERR" "$RXE_A" "$IDX_A" "$GID_A"); then
			result container_session FAIL "session line: ${b:-$a}"
		elif [ "$sent" -lt 10000 ] || [ "$rcvd" -lt 10000 ]; then
			result container_session FAIL "$RXE_A sent $sent, $RXE_B received $rcvd RoCE packets; expected >= 10000 each"
		elif grep -q 'warning' "$SERVER_ERR" "$CLIENT_ERR"; then
			result container_session FAIL "the entrypoint warned: $(grep -h -m 1 warning "$SERVER_ERR" "$CLIENT_ERR")"
		else
			result container_session PASS "10000 messages in order between two containers (podman --network host, --device, IPC_LOCK, memlock, STRICT=1) in $(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN { printf "%.1f", b - a }')s; $RXE_A sent $sent, $RXE_B received $rcvd RoCE packets; server: ${a%% |*}"
		fi
	fi

	# 2. no --device: the entrypoint refuses to start and names the flag
	next_port
	timeout "$T_CTR" bash -c 'ctr_run "$@"' sh "$NS_B" --network host --cap-add IPC_LOCK \
		-e RDMA_CONTAINER_STRICT=1 "$IMAGE" --server "$IP_B:$PORT" --once --transport verbs \
		>/tmp/container_nodev.out 2>/tmp/container_nodev.err
	a=$?
	show /tmp/container_nodev.err
	if [ "$a" = 1 ] && grep -q "refusing to start" /tmp/container_nodev.err &&
		grep -q -- "--device $dev_b" /tmp/container_nodev.err; then
		result container_nodev PASS "exit 1: $(grep -m 1 'uverbsN device node' /tmp/container_nodev.err | sed 's/^rdma-container-entrypoint: //' | cut -c1-160)"
	else
		result container_nodev FAIL "exit $a, expected 1 with 'refusing to start' naming --device $dev_b: $(why /tmp/container_nodev.err)"
	fi

	# 3. non-root (uid 1000): the server with only IPC_LOCK, the client with only a memlock
	# limit; then a server with neither fails at registration and says what to add.
	local user=(--user 1000:1000 --device /dev/infiniband/rdma_cm -e RUST_LOG=info)
	if ! ctr_session container_nonroot 1000 "${user[@]}" --device "$dev_b" --cap-add IPC_LOCK \
		-- "${user[@]}" --device "$dev_a" --ulimit memlock=-1:-1; then
		result container_nonroot FAIL "uid 1000 with IPC_LOCK (server) / memlock=-1 (client): $CTR_FAIL"
		return
	fi
	ctr_session container_nonroot_bare 10 "${user[@]}" --device "$dev_b" -- "${user[@]}" --device "$dev_a" \
		--ulimit memlock=-1:-1
	if [ -z "$CTR_FAIL" ]; then
		result container_nonroot FAIL "uid 1000 without IPC_LOCK or a memlock limit: the session worked, expected a registration failure (memlock $(ulimit -l) KiB)"
	elif grep -q 'IPC_LOCK' "$SERVER_ERR" && grep -q 'memlock' "$SERVER_ERR"; then
		result container_nonroot PASS "uid 1000: with only IPC_LOCK (server) and only memlock=-1 (client) 1000 messages in order; with neither the server says: $(grep -m 1 -E '^error|ERROR' "$SERVER_ERR" | cut -c1-200)"
	else
		result container_nonroot FAIL "uid 1000 with neither: the failure does not name IPC_LOCK and memlock: $CTR_FAIL"
	fi
}
