#!/usr/bin/env bash
# Plants one-line bugs in a scratch copy of the repository, one at a time, and runs the tests
# that should catch each: "caught" when they fail, "MISSED" when they still pass. Each bug is
# the bug an issue's gap describes (issues 32, 33 and 39), found by its text, never by line number,
# so the list survives edits; a bug whose text is not there exactly once is "stale" (fix the
# list); so is one that does not build.
#
#   scripts/mutants.sh              every mutant
#   scripts/mutants.sh data-port    the mutants whose name contains "data-port" (several:
#                                   data-port,metrics)
#
# First it runs every listed test command on the unchanged copy: they must pass, else the
# figures would mean nothing. Not run by CI (a build per mutant); the figures go in the session
# note. Run as root: some tests break connections with ss -K.
# Environment: MUTANTS_DIR (scratch, default /tmp/rdma-container-mutants), MUTANTS_TARGET_DIR
# (cargo's target dir, default inside it), MUTANTS_TIMEOUT (seconds per test run, default 900).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
exec python3 - "$repo" "${1:-}" <<'PY'
import os, shutil, subprocess, sys

repo, wanted = sys.argv[1], sys.argv[2]
work = os.environ.get("MUTANTS_DIR", "/tmp/rdma-container-mutants")
copy = os.path.join(work, "repo")
env = dict(os.environ, CARGO_TARGET_DIR=os.environ.get("MUTANTS_TARGET_DIR", os.path.join(work, "target")))
timeout = int(os.environ.get("MUTANTS_TIMEOUT", "900"))

# (name, file, text found exactly once, its replacement, the test command that must fail)
MUTANTS = [
    ("data-port-keeps-the-oldest-waiters", "src/transport/tcp.rs",
     "                    if pending.len() >= MAX_PENDING_DATA {\n",
     "                    if pending.len() >= MAX_PENDING_DATA { continue; }\n                    if false {\n",
     "cargo test --locked --test strangers holding"),
    ("data-port-admits-any-address", "src/transport/tcp.rs",
     "if from.ip() != std::net::IpAddr::V4(self.peer_ip) {", "if false {",
     "cargo test --locked --test strangers another_address"),
    ("resume-queue-keeps-attempts-whose-client-left", "src/listener/attempt_queue.rs",
     "            state.waiting.retain_mut(|a| !a.client_gone());\n            while",
     "            while",
     "cargo test --locked --lib attempt_queue"),
    ("resume-queue-full-is-a-final-refusal", "src/listener/attempt_queue.rs",
     "            while state.waiting.len() >= MAX_WAITING_ATTEMPTS {",
     "            if state.waiting.len() >= MAX_WAITING_ATTEMPTS { drop(state); attempt.tell_refused(); return; }\n            while state.waiting.len() >= MAX_WAITING_ATTEMPTS {",
     "cargo test --locked --lib attempt_queue"),
    ("resume-busy-ends-the-session", "src/session_core/resume_handshake.rs",
     "if reason == RESUME_BUSY =>", "if reason == \"never\" =>",
     "cargo test --locked --lib busy_session"),
    ("resume-resent-not-counted", "src/session/resume.rs",
     "counters.count(resent(&outcome, P::ROLE));", "counters.count(0);",
     "cargo test --locked --features test-hooks --test resume_combined 64_kib"),
    ("resume-attempt-routed-to-another-session", "src/listener/resume_registry.rs",
     "lock(registry).get(id).cloned();",
     "lock(registry).values().next().cloned();",
     "cargo test --locked --features test-hooks --test resume_combined four_keyed"),
    ("peer-text-not-escaped", "src/log_text.rs",
     "        if c.is_control() ||", "        if false &&",
     "cargo test --locked --test strangers stranger_text"),
    ("stranger-events-not-rate-limited", "src/log_text.rs",
     ".is_none_or(|t| now.saturating_duration_since(t) >= LOG_INTERVAL);", ".is_none_or(|_| true);",
     "cargo test --locked --test strangers stranger_text"),
    ("metrics-without-a-request-deadline", "src/cli/metrics_http.rs",
     "if now.saturating_duration_since(c.accepted) >= REQUEST_DEADLINE {", "if false {",
     "cargo test --locked --bin rdma-container metrics_http"),
    ("metrics-one-connection-at-a-time", "src/cli/metrics_http.rs",
     "        if self.conns.len() >= MAX_CONNECTIONS {", "        if !self.conns.is_empty() {",
     "cargo test --locked --bin rdma-container metrics_http"),
    ("metrics-checksum-series-missing", "src/cli/metrics.rs",
     "    \"checksum\",\n    \"timeout\",", "    \"checksums\",\n    \"timeout\",",
     "cargo test --locked --test metrics openmetrics"),
    ("key-file-fifo-is-read", "src/auth.rs",
     "        if !meta.is_file() {", "        if meta.is_dir() {",
     "cargo test --locked --test strangers key_files"),
    ("usage-errors-exit-1", "src/cli/result.rs",
     "        return super::EXIT_USAGE;", "        return 1;",
     "cargo test --locked --test rules ipv6"),
    ("handshake-table-evicts-an-authenticated-client", "src/listener/mod.rs",
     ".position(|e| !e.authenticated.load(Ordering::Relaxed))", ".position(|_| true)",
     "cargo test --locked --lib listener::tests"),
    ("garbled-frame-before-auth-gets-no-reject", "src/session_core/handshake.rs",
     "(Error::Decode(d), Stage::ClientChallenge | Stage::ClientProof) => {",
     "(Error::Decode(d), Stage::Failed) => {",
     "cargo test --locked --lib undecodable_frame"),
    ("manifest-variable-renamed", "src/cli/args.rs",
     "env = \"RDMA_CONTAINER_REQUIRE_RDMA\"", "env = \"RDMA_CONTAINER_REQUIRE_RDMA_X\"",
     "cargo test --locked --test env_names"),
    # issue 32's other gaps and issue 35's findings
    ("default-resume-timeout-15-s", "src/config.rs",
     "DEFAULT_RESUME_TIMEOUT: Duration = Duration::from_secs(10);",
     "DEFAULT_RESUME_TIMEOUT: Duration = Duration::from_secs(15);",
     "cargo test --locked --features test-hooks --test resume the_default_resume_timeout"),
    ("cli-resume-timeout-default-apart", "src/cli/args.rs",
     "default_value_t = SecondsOrOff(rdma_container::DEFAULT_RESUME_TIMEOUT),",
     "default_value_t = SecondsOrOff(Duration::from_secs(15)),",
     "cargo test --locked --features test-hooks --test resume the_default_resume_timeout"),
    ("key-of-15-bytes-accepted", "src/auth.rs",
     "pub(crate) const MIN_KEY_LEN: usize = 16;", "pub(crate) const MIN_KEY_LEN: usize = 15;",
     "cargo test --locked --lib key_files_hold"),
    ("bench-lat-average-doubled", "src/cli/bench/report.rs",
     "        t_avg_us: avg / 1000.0,", "        t_avg_us: avg / 500.0,",
     "cargo test --locked --test bench_clock"),
    ("metrics-port-binds-every-address", "src/cli/args.rs",
     "MetricsAddr(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))",
     "MetricsAddr(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))",
     "cargo test --locked --test metrics openmetrics"),
    ("json-result-field-renamed", "src/cli/result.rs",
     "    pub messages_resent: u64,", "    #[serde(rename = \"resent\")]\n    pub messages_resent: u64,",
     "cargo test --locked --test json_outputs a_resumed_session"),
    ("checksum-mismatch-passes", "src/checksum.rs",
     "            if stored != computed {", "            if stored != computed && len == usize::MAX {",
     "cargo test --locked --features test-hooks --test checksum corrupted"),
    ("explicit-device-falls-back-to-tcp", "src/session/choice.rs",
     "        config.overrides.requested()\n    };", "        None\n    };",
     "cargo test --locked --test explicit_device"),
    ("restarted-client-told-busy", "src/listener/resume_registry.rs",
     "            .any(|(since, attempts)| attempts.take_over(since))",
     "            .any(|(since, attempts)| attempts.take_over(since) && false)",
     "cargo test --locked --test restart restarted_after_a_crash"),
    ("no-session-answer-retried", "src/session_core/resume_handshake.rs",
     "(Stage::Challenge, Message::Reject { reason }) if reason == RESUME_NO_SESSION =>",
     "(Stage::Challenge, Message::Reject { reason }) if reason == \"never\" =>",
     "cargo test --locked --test restart ends_at_once_on_no_session"),
    # Issue 39: --qps N, one ordered stream over several lanes.
    ("striped-completions-before-they-happen", "src/transport/striped.rs",
     "        self.role.post_order.push_back((i, false));",
     "        self.role.post_order.push_back((i, true));",
     "cargo test --locked --lib transport::striped"),
    ("striped-every-message-numbered-0", "src/transport/striped.rs",
     "header[..4].copy_from_slice(&(number as u32).to_le_bytes());",
     "header[..4].copy_from_slice(&0u32.to_le_bytes());",
     "cargo test --locked --test process striped"),
    ("striped-reset-forgets-what-waited-in-the-window", "src/transport/striped.rs",
     "            result = result.and(lanes[lane].post_recv(message.into_slot()));",
     "            let _ = (lane, message);",
     "cargo test --locked --lib transport::striped"),
    ("striped-sender-numbers-go-on-after-a-reset", "src/transport/striped.rs",
     "        self.post_order.clear();\n        self.next_number = 0;",
     "        self.post_order.clear();",
     "cargo test --locked --features test-hooks --test resume_combined four_queue_pairs"),
    ("striped-oldest-lane-never-asked-to-report", "src/transport/striped.rs",
     "            result = result.and(self.lanes[lane].flush_sends());",
     "            let _ = lane;",
     "cargo test --locked --lib transport::striped"),
    ("striped-one-closed-lane-ends-the-stream", "src/transport/striped.rs",
     "            if closed.iter().all(|&c| c) {",
     "            if true {",
     "cargo test --locked --lib transport::striped"),
    ("striped-reset-loses-a-send-completed-behind-another", "src/transport/striped.rs",
     "                reclaimed.extend(ours.take());",
     "                let _ = ours;",
     "cargo test --locked --lib transport::striped"),
    ("server-ignores-the-clients-qps", "src/session/handshake.rs",
     "let config = &config.clone().with_qps(pending_hello.qps);",
     "let config = &config.clone();",
     "cargo test --locked --test process striped"),
    # Issue 39: --paths, the queue pairs over several paths.
    ("paths-every-lane-on-path-0", "src/transport/mod.rs",
     "    let paths = params.extra_paths.len() + 1;",
     "    let paths = params.extra_paths.len().min(0) + 1;",
     "cargo test --locked --test netns two_paths"),
    ("paths-server-runs-an-address-not-its-own", "src/session/route_paths.rs",
     "                ours.iter().any(|a| a.address == pair.server)\n",
     "                !ours.is_empty()\n",
     "cargo test --locked --lib route_paths"),
    ("paths-a-peer-with-other-paths-is-accepted", "src/session_core/handshake.rs",
     "    if ours.paths != theirs.paths {",
     "    if ours.paths.len() > 99 {",
     "cargo test --locked --lib handshake"),
    ("paths-server-ignores-the-clients-paths", "src/session/handshake.rs",
     "            Some(&pending_hello.paths),",
     "            Some(&[]),",
     "cargo test --locked --test netns two_paths"),
    ("parking-never-leaves-a-failed-path-out", "src/transport/striped/parking.rs",
     "            state.hold = if std::mem::take(&mut state.failed) {",
     "            state.hold = if std::mem::take(&mut state.failed) && false {",
     "cargo test --locked --test netns lost_for_good"),
    ("rebuild-a-path-left-out-is-never-taken-back", "src/transport/striped/parking.rs",
     "        if self.retries != Retries::Schedules {\n            return None;",
     "        if true {\n            return None;",
     "cargo test --locked --test netns used_again"),
    ("rebuild-resumes-without-asking-the-path", "src/session/mod.rs",
     "        let (server, probe) = self.resume.as_mut()?.client_probe()?;",
     "        if true {\n            return Some(Planned::RetryPaths);\n        }\n        let (server, probe) = self.resume.as_mut()?.client_probe()?;",
     "cargo test --locked --test netns used_again"),
    ("rebuild-the-server-holds-back-a-path-the-client-tries", "src/transport/striped/parking.rs",
     "            } else if waiting && (schedules || !state.out_when_connected) {",
     "            } else if waiting {",
     "cargo test --locked --lib transport::striped::parking"),
    ("paths-bytes-a-receiver-counts-nothing", "src/transport/striped.rs",
     "            self.counters.add(self.parking.path_of(lane), len);\n            self.role.held",
     "            self.role.held",
     "cargo test --locked --test netns two_paths"),
    ("rebuild-a-path-retry-counts-as-a-break", "src/session_core/lifecycle.rs",
     "        if let Some(e) = &cause {\n            let stalled_out",
     "        if let Some(e) = cause.as_ref().or(Some(&Error::Closed)) {\n            let stalled_out",
     "cargo test --locked --lib session_core::lifecycle"),
    ("parking-a-resend-stays-on-its-parked-lane", "src/transport/striped.rs",
     "        if self.parking.is_parked(lane) {\n            lane = self.move_off_parked(i, lane, len)?;",
     "        if false {\n            lane = self.move_off_parked(i, lane, len)?;",
     "cargo test --locked --lib transport::striped"),
    ("parking-the-peers-parked-lanes-ignored", "src/transport/striped.rs",
     "            if blob.is_none() {\n                self.parking.peer_parked(i);",
     "            if blob.is_none() && false {\n                self.parking.peer_parked(i);",
     "cargo test --locked --lib transport::striped"),
    ("parking-a-path-left-out-is-not-counted", "src/transport/striped/parking.rs",
     "                (false, true) => {\n                    self.events.lost += 1;",
     "                (false, true) => {",
     "cargo test --locked --lib transport::striped::parking"),
    ("flush-retires-sends-posted-behind-it", "src/transport/signaling.rs",
     "            if done == last {\n                break;\n            }",
     "            let _ = last;",
     "cargo test --locked --lib transport::signaling"),
]

def log(msg):
    print(f"mutants: {msg}", file=sys.stderr, flush=True)

selected = [m for m in MUTANTS if any(w in m[0] for w in wanted.split(","))]
if not selected:
    log(f"no mutant matches {wanted!r}")
    sys.exit(2)

os.makedirs(work, exist_ok=True)
log(f"copying the repository to {copy} (target dir {env['CARGO_TARGET_DIR']})")
shutil.rmtree(copy, ignore_errors=True)
files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       cwd=repo, check=True, capture_output=True).stdout.split(b"\0")
for f in filter(None, files):
    src, dst = os.path.join(repo, f.decode()), os.path.join(copy, f.decode())
    if os.path.isfile(src):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)

def passes(cmd):
    with open(os.path.join(work, "last.log"), "w") as out:
        try:
            return subprocess.run(["bash", "-c", cmd], cwd=copy, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=timeout).returncode == 0
        except subprocess.TimeoutExpired:
            return False

log("baseline: every listed test passes on the unchanged copy")
for cmd in dict.fromkeys(m[4] for m in selected):
    if not passes(cmd):
        log(f"baseline FAILED: {cmd} (see {work}/last.log): fix the tests first")
        sys.exit(1)

counts = {"caught": 0, "MISSED": 0, "stale": 0}
for name, rel, find, repl, cmd in selected:
    path = os.path.join(copy, rel)
    original = open(path).read()
    if original.count(find) != 1:
        verdict = "stale"
    else:
        open(path, "w").write(original.replace(find, repl))
        try:
            verdict = "MISSED" if passes(cmd) else "caught"
            if verdict == "caught" and "could not compile" in open(os.path.join(work, "last.log")).read():
                verdict = "stale"  # a bug that does not build proves nothing
        finally:
            open(path, "w").write(original)
    counts[verdict] += 1
    print(f"{verdict:7} {name}: {cmd}", flush=True)

print(f"mutants: {counts['caught']} caught, {counts['MISSED']} missed, {counts['stale']} stale "
      f"(of {len(selected)})")
sys.exit(0 if counts["MISSED"] == 0 and counts["stale"] == 0 else 1)
PY
