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
# One container start costs 2-10 s under TCG (podman, runc), more on a loaded host or in the
# aarch64 guest (another architecture emulated); a session adds its transfer.
T_CTR=$((T_RUN > 120 ? T_RUN : 120))

# The cgroup v1 hierarchies podman needs, as on the CI host (its containers.conf: cgroupfs).
# Not cgroup2: podman 4.3.1 (bookworm's, copied into the guest) cannot start a container in a
# pod on cgroup2 with the cgroupfs manager (the pod's cgroup denies every device: "error
# reopening /dev/null inside container: open /dev/null: operation not permitted"), which
# `podman kube play` needs; `podman run` alone works on either. Mounting a hierarchy again
# (in a namespace whose /sys is fresh) gives the same one. The guest kernel has neither a
# memory nor a cpuset controller on v1: podman does without, and the kube check's pods are
# played without memory limits (scripts/kube-play.py --no-memory-limit).
mount_cgroups() {
	local c
	mounted /sys/fs/cgroup || mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup || return 1
	for c in cpu cpuacct devices freezer blkio pids; do
		mkdir -p "/sys/fs/cgroup/$c"
		mounted "/sys/fs/cgroup/$c" || mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c" || return 1
	done
	mkdir -p /sys/fs/cgroup/systemd
	mounted /sys/fs/cgroup/systemd || mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
}

# Whether something is mounted at PATH (busybox has no mountpoint).
mounted() { # path
	awk -v p="$1" '$2 == p { f = 1 } END { exit !f }' /proc/self/mounts
}

# Mounts what podman needs on the initramfs root: the cgroup hierarchies and tmpfs for its
# storage.
container_setup() {
	mount_cgroups && mount -t tmpfs tmpfs /var/lib/containers && mount -t tmpfs tmpfs /var/tmp
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
# /sys, so the cgroup hierarchies are mounted again inside.
ctr_run() { # ns podman-run-args...
	local ns=$1
	shift
	# shellcheck disable=SC2016 # expanded by the inner shell
	ip netns exec "$ns" bash -c 'mount_cgroups 2>/dev/null; exec podman run --rm "$@"' \
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
		result container_load FAIL "cannot mount the cgroup hierarchies and tmpfs for podman"
		return
	fi
	export -f ctr_run mount_cgroups mounted
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

# The shipped Kubernetes YAML (deploy/kubernetes/shared) played by `podman kube play`, as the
# host's container-test does, but over rxe: the host's scripts/kube-play.py turned it into
# pods (/opt/kube; its substitutions in /opt/kube/plan: the Job as a Pod, the device plugin's
# nodes as CharDevice hostPaths, the downward API file). Each pod runs with podman's host
# network of a namespace (server nsB, client nsA) whose veth, the rxe device's netdev, also gets
# the address the pod's Multus annotation asks for, so rxe has a RoCE v2 GID for it: what
# Multus' macvlan and the shared device plugin give a pod on a ConnectX. Nothing else changes:
# RDMA_CONTAINER_REQUIRE_RDMA stays true, so the session is verbs or fails.
check_container_kube() {
	local plan=/opt/kube/plan server=rdma-container-server client=rdma-container-client
	local addr_s addr_c dev_s dev_c image rc probe why="" t0 sent0 sent
	if ! podman image exists "$IMAGE" 2>/dev/null; then
		result container_kube FAIL "the image was not loaded (container_load)"
		return
	fi
	sed 's/^/  | /' "$plan"
	addr_s=$(awk -v p="$server" '$1 == "NETNS" && $2 == p { print $4 }' "$plan")
	addr_c=$(awk -v p="$client" '$1 == "NETNS" && $2 == p { print $4 }' "$plan")
	dev_s=$(uverbs_of "$RXE_B") dev_c=$(uverbs_of "$RXE_A")
	mkdir -p /tmp/kube
	sed -e "s#@UVERBS@#${dev_s##*/}#g" "/opt/kube/$server.yaml" >"/tmp/kube/$server.yaml"
	sed -e "s#@UVERBS@#${dev_c##*/}#g" "/opt/kube/$client.yaml" >"/tmp/kube/$client.yaml"
	sed -i -e "s#@NETDEV@#vB#g" "/opt/kube/$server-podnetinfo/annotations"
	sed -i -e "s#@NETDEV@#vA#g" "/opt/kube/$client-podnetinfo/annotations"
	awk '$1 == "IMAGE" { print $3 }' "$plan" | sort -u | while read -r image; do
		podman tag "$IMAGE" "localhost/$image"
	done
	if ! ip -n "$NS_B" addr add "$addr_s" dev vB || ! ip -n "$NS_A" addr add "$addr_c" dev vA; then
		result container_kube FAIL "could not add $addr_s to vB and $addr_c to vA"
		return
	fi
	sleep 1 # rxe adds the GIDs for the new addresses from a work queue
	sent0=$(counter "$RXE_A" sent_pkts)
	t0=$(uptime_s)
	nsenter --net="/run/netns/$NS_B" podman kube play --network host "/tmp/kube/$server.yaml" \
		>/tmp/kube/play.log 2>&1 || why="podman kube play $server failed"
	if [ -z "$why" ]; then
		local i
		for ((i = 0; i < T_CTR * 10; i++)); do
			ip netns exec "$NS_B" cat /proc/net/tcp |
				awk '$2 ~ /:1388$/ && $4 == "0A" { f = 1 } END { exit !f }' && break
			sleep 0.1
		done
		nsenter --net="/run/netns/$NS_A" podman kube play --network host "/tmp/kube/$client.yaml" \
			>>/tmp/kube/play.log 2>&1 || why="podman kube play $client failed"
	fi
	if [ -z "$why" ]; then
		rc=$(timeout "$T_CTR" podman wait "$client-client" 2>>/tmp/kube/play.log) || rc="none (timed out)"
		podman logs "$client-client" >/tmp/kube/client.log 2>&1
		podman logs "$server-server" >/tmp/kube/server.log 2>&1
		sent=$(($(counter "$RXE_A" sent_pkts) - sent0))
		if [ "$rc" != 0 ]; then
			why="the client's pod exited $rc: $(why /tmp/kube/client.log)"
		elif ! grep -q '^{"role":"server".*"transport":"verbs".*"messages":10000,.*"ending":{"kind":"finished"}' /tmp/kube/server.log; then
			why="the server's JSON does not record 10,000 messages finished over verbs: $(why /tmp/kube/server.log)"
		elif [ "$sent" -lt 10000 ]; then
			why="$RXE_A sent $sent RoCE packets, expected >= 10000"
		fi
	fi
	# the readiness probe's command (podman 4.x does not run readinessProbe): RDMA usable, 0
	podman exec "$server-server" /usr/local/bin/rdma-container doctor --require-rdma >/tmp/kube/probe.out 2>&1
	probe=$?
	[ -n "$why" ] || [ "$probe" = 0 ] || why="the readiness probe's command exited $probe: $(tail -n 1 /tmp/kube/probe.out)"
	# the kubelet's stop: SIGTERM, a clean stop with 143
	timeout "$T_CTR" podman pod stop -t 20 "$server" >>/tmp/kube/play.log 2>&1
	rc=$(podman inspect --format '{{.State.ExitCode}}' "$server-server" 2>/dev/null)
	podman logs "$server-server" >/tmp/kube/server.log 2>&1
	if [ -z "$why" ] && { [ "$rc" != 143 ] || ! grep -q 'stopped (SIGTERM) after 1 session' /tmp/kube/server.log; }; then
		why="podman pod stop: the server exited $rc (expected 143, \"stopped (SIGTERM) after 1 session(s)\")"
	fi
	podman kube play --down "/tmp/kube/$server.yaml" >/dev/null 2>&1
	podman kube play --down "/tmp/kube/$client.yaml" >/dev/null 2>&1
	ip -n "$NS_B" addr del "$addr_s" dev vB
	ip -n "$NS_A" addr del "$addr_c" dev vA
	if [ -n "$why" ]; then
		show /tmp/kube/play.log /tmp/kube/server.log /tmp/kube/client.log /tmp/kube/probe.out
		result container_kube FAIL "$why"
	else
		result container_kube PASS "podman kube play of deploy/kubernetes/shared over rxe (REQUIRE_RDMA=true): client Job pod exit 0, server 10,000 messages finished over verbs in $(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN { printf "%.1f", b - a }')s, $RXE_A sent $sent RoCE packets; readiness probe command exit 0; pod stop 143; $(grep -c '^SUBSTITUTED' "$plan") substitutions (above)"
	fi
}
