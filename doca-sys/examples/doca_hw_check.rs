//! `doca_hw_check`: what the first run on a ConnectX or BlueField must tell us, as one JSON
//! object on stdout (run it through `scripts/doca-hw-check.sh`; docs/doca.md says how).
//!
//! It records: the device's caps (message size, send and receive queue sizes), the memlock
//! limit, whether the PE accepts PROGRESS_ALL, `doca_ctx_start`'s code and the state after it,
//! the exported blob's size, `doca_ctx_stop` with and without a task allocated (code, state,
//! time to IDLE), the receive latency of a self-connected context with the notification armed
//! on every poll and armed only before sleeping, and the completion status and time until a
//! killed peer process (a second context on the same device) is detected by a send.
//!
//! Options: `--device IBDEV` (default: the first DOCA lists), `--gid-index N` (default 0; use
//! the RoCE v2 GID of the device's address, `rdma-container doctor` shows it).

#[cfg(not(doca_sys_bindings))]
fn main() {
    eprintln!(
        "doca_hw_check: doca-sys was built without DOCA ({}): build with the DOCA SDK \
         (--features require-doca) or the simulator (--features sim)",
        doca_sys::FOUND
    );
    std::process::exit(2);
}

#[cfg(doca_sys_bindings)]
fn main() {
    probe::main();
}

#[cfg(doca_sys_bindings)]
mod probe {
    use doca_sys::*;
    use std::cell::RefCell;
    use std::ffi::{c_void, CStr};
    use std::io::{BufRead, Write};
    use std::process::{Command, Stdio};
    use std::ptr;
    use std::time::{Duration, Instant};

    type Res<T> = Result<T, String>;

    const TASKS: u32 = 64;
    const ROUND_TRIPS: u32 = 200;
    /// Added to a round trip's user value for its send (its receive carries the plain value).
    const SEND_TAG: u64 = 10_000_000;

    fn name(rc: doca_error_t) -> String {
        // SAFETY: accepts any value; returns a static C string or NULL.
        let p = unsafe { doca_error_get_name(rc) };
        if p.is_null() {
            return format!("doca_error {}", rc.0);
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn ok(call: &str, rc: doca_error_t) -> Res<()> {
        if rc == doca_error::DOCA_SUCCESS {
            Ok(())
        } else {
            Err(format!("{call}: {}", name(rc)))
        }
    }

    fn state_name(s: doca_ctx_states) -> &'static str {
        match s {
            doca_ctx_states::DOCA_CTX_STATE_IDLE => "IDLE",
            doca_ctx_states::DOCA_CTX_STATE_STARTING => "STARTING",
            doca_ctx_states::DOCA_CTX_STATE_RUNNING => "RUNNING",
            doca_ctx_states::DOCA_CTX_STATE_STOPPING => "STOPPING",
            _ => "unknown",
        }
    }

    fn js(s: &str) -> String {
        format!("{s:?}")
    }

    /// What the callbacks saw: (user value, status) per completed task.
    #[derive(Default)]
    struct Log {
        done: Vec<(u64, doca_error_t)>,
    }

    fn log_of<'a>(ud: doca_data) -> &'a RefCell<Log> {
        // SAFETY: every context's user data is its `Box<RefCell<Log>>`, alive until the
        // context is destroyed; callbacks run only inside doca_pe_progress on this thread.
        unsafe { &*ud.ptr.cast::<RefCell<Log>>() }
    }

    unsafe extern "C" fn on_send(t: *mut doca_rdma_task_send, ud: doca_data, cud: doca_data) {
        // SAFETY: DOCA hands us a live task.
        let status = unsafe { doca_task_get_status(doca_rdma_task_send_as_task(t)) };
        // SAFETY: our tasks carry a u64.
        let user = unsafe { ud.u64_ };
        log_of(cud).borrow_mut().done.push((user, status));
        // SAFETY: the task is ours again inside its callback.
        unsafe { doca_task_free(doca_rdma_task_send_as_task(t)) };
    }

    unsafe extern "C" fn on_recv(t: *mut doca_rdma_task_receive, ud: doca_data, cud: doca_data) {
        // SAFETY: DOCA hands us a live task.
        let status = unsafe { doca_task_get_status(doca_rdma_task_receive_as_task(t)) };
        // SAFETY: our tasks carry a u64.
        let user = unsafe { ud.u64_ };
        log_of(cud).borrow_mut().done.push((user, status));
        // SAFETY: the task is ours again inside its callback.
        unsafe { doca_task_free(doca_rdma_task_receive_as_task(t)) };
    }

    pub(super) struct Opts {
        device: Option<String>,
        gid_index: u32,
    }

    fn open(want: Option<&str>) -> Res<(*mut doca_dev, String)> {
        let mut list: *mut *mut doca_devinfo = ptr::null_mut();
        let mut n = 0u32;
        // SAFETY: out pointers are valid locals.
        ok("doca_devinfo_create_list", unsafe {
            doca_devinfo_create_list(&mut list, &mut n)
        })?;
        let mut found = Err(format!("no DOCA device named {want:?}"));
        for i in 0..n as usize {
            // SAFETY: the list holds n entries until destroyed.
            let info = unsafe { *list.add(i) };
            let mut buf = [0u8; 64];
            // SAFETY: buf has DOCA_DEVINFO_IBDEV_NAME_SIZE bytes.
            let rc = unsafe { doca_devinfo_get_ibdev_name(info, buf.as_mut_ptr().cast(), 64) };
            let got = CStr::from_bytes_until_nul(&buf)
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default();
            if rc != doca_error::DOCA_SUCCESS || want.is_some_and(|w| w != got) {
                continue;
            }
            let mut dev = ptr::null_mut();
            // SAFETY: info is a live list entry; dev is a valid out pointer.
            found =
                ok("doca_dev_open", unsafe { doca_dev_open(info, &mut dev) }).map(|()| (dev, got));
            break;
        }
        // SAFETY: the list came from create_list; an opened device outlives it.
        unsafe { doca_devinfo_destroy_list(list) };
        found
    }

    /// One RC context with its PE, a 4 KiB registered buffer and one buf.
    struct Ctx {
        pe: *mut doca_pe,
        rdma: *mut doca_rdma,
        ctx: *mut doca_ctx,
        mmap: *mut doca_mmap,
        inv: *mut doca_buf_inventory,
        conn: *mut doca_rdma_connection,
        fd: doca_notification_handle_t,
        progress_all: bool,
        log: Box<RefCell<Log>>,
        mem: Vec<u8>,
    }

    impl Ctx {
        fn new(dev: *mut doca_dev, gid_index: u32) -> Res<Ctx> {
            let mut c = Ctx {
                pe: ptr::null_mut(),
                rdma: ptr::null_mut(),
                ctx: ptr::null_mut(),
                mmap: ptr::null_mut(),
                inv: ptr::null_mut(),
                conn: ptr::null_mut(),
                fd: -1,
                progress_all: false,
                log: Box::default(),
                mem: vec![0u8; 4096],
            };
            let rw = doca_access_flag::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE.0;
            let ud = doca_data {
                ptr: (&*c.log as *const RefCell<Log>).cast_mut().cast::<c_void>(),
            };
            // SAFETY: (every call in this block) each object passed was created just before
            // in this block; out pointers are fields of `c`; the memory range is `c.mem`,
            // which lives (and never moves) as long as `c`.
            unsafe {
                ok("doca_mmap_create", doca_mmap_create(&mut c.mmap))?;
                ok(
                    "doca_mmap_set_permissions",
                    doca_mmap_set_permissions(c.mmap, rw),
                )?;
                ok(
                    "doca_mmap_set_memrange",
                    doca_mmap_set_memrange(c.mmap, c.mem.as_mut_ptr().cast(), c.mem.len()),
                )?;
                ok("doca_mmap_add_dev", doca_mmap_add_dev(c.mmap, dev))?;
                ok("doca_mmap_start", doca_mmap_start(c.mmap))?;
                ok(
                    "doca_buf_inventory_create",
                    doca_buf_inventory_create(4, &mut c.inv),
                )?;
                ok("doca_buf_inventory_start", doca_buf_inventory_start(c.inv))?;
                ok("doca_pe_create", doca_pe_create(&mut c.pe))?;
                c.progress_all = doca_pe_set_event_mode(
                    c.pe,
                    doca_pe_event_mode::DOCA_PE_EVENT_MODE_PROGRESS_ALL,
                ) == doca_error::DOCA_SUCCESS;
                ok(
                    "doca_pe_get_notification_handle",
                    doca_pe_get_notification_handle(c.pe, &mut c.fd),
                )?;
                ok("doca_rdma_create", doca_rdma_create(dev, &mut c.rdma))?;
                c.ctx = doca_rdma_as_ctx(c.rdma);
                ok(
                    "doca_rdma_set_permissions",
                    doca_rdma_set_permissions(c.rdma, rw),
                )?;
                ok(
                    "doca_rdma_set_gid_index",
                    doca_rdma_set_gid_index(c.rdma, gid_index),
                )?;
                ok(
                    "doca_rdma_set_grh_enabled",
                    doca_rdma_set_grh_enabled(c.rdma, 1),
                )?;
                ok(
                    "doca_rdma_set_transport_type",
                    doca_rdma_set_transport_type(
                        c.rdma,
                        doca_rdma_transport_type::DOCA_RDMA_TRANSPORT_TYPE_RC,
                    ),
                )?;
                ok(
                    "doca_rdma_set_max_num_connections",
                    doca_rdma_set_max_num_connections(c.rdma, 1),
                )?;
                ok(
                    "doca_rdma_set_send_queue_size",
                    doca_rdma_set_send_queue_size(c.rdma, 16),
                )?;
                ok("doca_pe_connect_ctx", doca_pe_connect_ctx(c.pe, c.ctx))?;
                ok(
                    "doca_rdma_task_send_set_conf",
                    doca_rdma_task_send_set_conf(c.rdma, Some(on_send), Some(on_send), TASKS),
                )?;
                ok(
                    "doca_rdma_task_receive_set_conf",
                    doca_rdma_task_receive_set_conf(c.rdma, Some(on_recv), Some(on_recv), TASKS),
                )?;
                ok("doca_ctx_set_user_data", doca_ctx_set_user_data(c.ctx, ud))?;
            }
            Ok(c)
        }

        fn state(&self) -> doca_ctx_states {
            let mut s = doca_ctx_states::DOCA_CTX_STATE_IDLE;
            // SAFETY: the context is alive; s is a valid out pointer.
            unsafe { doca_ctx_get_state(self.ctx, &mut s) };
            s
        }

        fn progress(&mut self) -> bool {
            let mut any = false;
            // SAFETY: the PE is alive; callbacks only touch our log.
            while unsafe { doca_pe_progress(self.pe) } != 0 {
                any = true;
            }
            any
        }

        fn progress_until(&mut self, t: Duration, done: impl Fn(&Ctx) -> bool) -> bool {
            let end = Instant::now() + t;
            while !done(self) {
                if Instant::now() > end {
                    return false;
                }
                if !self.progress() {
                    self.clear_if_raised();
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            true
        }

        fn readable(&self, ms: i32) -> bool {
            let mut p = libc::pollfd {
                fd: self.fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, ms) == 1 }
        }

        fn clear_if_raised(&mut self) {
            if !self.progress_all && self.readable(0) {
                // SAFETY: the PE is alive and its handle fired.
                unsafe { doca_pe_clear_notification(self.pe, self.fd) };
            }
        }

        fn arm(&mut self) {
            // SAFETY: the PE is alive.
            unsafe { doca_pe_request_notification(self.pe) };
        }

        /// `doca_ctx_start`: its code and the state right after it.
        fn start(&mut self) -> (String, &'static str) {
            // SAFETY: the context is configured and IDLE.
            let rc = unsafe { doca_ctx_start(self.ctx) };
            (name(rc), state_name(self.state()))
        }

        /// Exports our connection; returns the blob.
        fn export(&mut self) -> Res<Vec<u8>> {
            let may = |c: &Ctx| {
                matches!(
                    c.state(),
                    doca_ctx_states::DOCA_CTX_STATE_STARTING
                        | doca_ctx_states::DOCA_CTX_STATE_RUNNING
                )
            };
            if !self.progress_until(Duration::from_secs(5), may) {
                return Err(format!(
                    "context {} 5 s after start",
                    state_name(self.state())
                ));
            }
            let mut blob: *const c_void = ptr::null();
            let mut len = 0usize;
            // SAFETY: out pointers are valid; the context is started.
            ok("doca_rdma_export", unsafe {
                doca_rdma_export(self.rdma, &mut blob, &mut len, &mut self.conn)
            })?;
            // SAFETY: DOCA returned len readable bytes at blob.
            Ok(unsafe { std::slice::from_raw_parts(blob.cast::<u8>(), len) }.to_vec())
        }

        fn connect(&mut self, blob: &[u8]) -> Res<()> {
            // SAFETY: blob is readable for its length; conn came from our export.
            ok("doca_rdma_connect", unsafe {
                doca_rdma_connect(self.rdma, blob.as_ptr().cast(), blob.len(), self.conn)
            })?;
            let running = |c: &Ctx| c.state() == doca_ctx_states::DOCA_CTX_STATE_RUNNING;
            if self.progress_until(Duration::from_secs(10), running) {
                Ok(())
            } else {
                Err(format!(
                    "context {} 10 s after connect",
                    state_name(self.state())
                ))
            }
        }

        fn post_recv(&mut self, user: u64) -> Res<()> {
            let mut t = ptr::null_mut();
            // SAFETY: RUNNING and connected; a NULL buf receives an empty message.
            ok("doca_rdma_task_receive_allocate_init", unsafe {
                doca_rdma_task_receive_allocate_init(
                    self.rdma,
                    ptr::null_mut(),
                    doca_data { u64_: user },
                    &mut t,
                )
            })?;
            // SAFETY: the task was just allocated; on failure it is ours to free.
            let rc = unsafe { doca_task_submit(doca_rdma_task_receive_as_task(t)) };
            if rc != doca_error::DOCA_SUCCESS {
                // SAFETY: not submitted.
                unsafe { doca_task_free(doca_rdma_task_receive_as_task(t)) };
            }
            ok("doca_task_submit(receive)", rc)
        }

        /// A zero-length send; Err carries the submit's code.
        fn send(&mut self, user: u64) -> Res<()> {
            let mut t = ptr::null_mut();
            // SAFETY: RUNNING and connected; a NULL buf sends an empty message.
            ok("doca_rdma_task_send_allocate_init", unsafe {
                doca_rdma_task_send_allocate_init(
                    self.rdma,
                    self.conn,
                    ptr::null(),
                    doca_data { u64_: user },
                    &mut t,
                )
            })?;
            // SAFETY: the task was just allocated; on failure it is ours to free.
            let rc = unsafe { doca_task_submit(doca_rdma_task_send_as_task(t)) };
            if rc != doca_error::DOCA_SUCCESS {
                // SAFETY: not submitted.
                unsafe { doca_task_free(doca_rdma_task_send_as_task(t)) };
            }
            ok("doca_task_submit(send)", rc)
        }

        fn seen(&self, user: u64) -> Option<doca_error_t> {
            let log = self.log.borrow();
            log.done.iter().find(|(u, _)| *u == user).map(|(_, s)| *s)
        }

        /// `doca_ctx_stop` (with one receive task allocated and not submitted when
        /// `with_task`): its code, the state after it, and the ms until IDLE (the task freed
        /// once the stop was answered).
        fn stop(&mut self, with_task: bool) -> Res<String> {
            let mut task = ptr::null_mut();
            if with_task {
                // SAFETY: RUNNING and connected; out pointer valid.
                ok("doca_rdma_task_receive_allocate_init", unsafe {
                    doca_rdma_task_receive_allocate_init(
                        self.rdma,
                        ptr::null_mut(),
                        doca_data { u64_: u64::MAX },
                        &mut task,
                    )
                })?;
            }
            let t0 = Instant::now();
            // SAFETY: the context is alive and started.
            let rc = unsafe { doca_ctx_stop(self.ctx) };
            let after = state_name(self.state());
            if !task.is_null() {
                // SAFETY: allocated, never submitted.
                unsafe { doca_task_free(doca_rdma_task_receive_as_task(task)) };
            }
            let mut retried = None;
            if rc == doca_error::DOCA_ERROR_IN_USE || rc == doca_error::DOCA_ERROR_AGAIN {
                // SAFETY: as above; the task is freed now.
                retried = Some(name(unsafe { doca_ctx_stop(self.ctx) }));
            }
            let idle = |c: &Ctx| c.state() == doca_ctx_states::DOCA_CTX_STATE_IDLE;
            let reached = self.progress_until(Duration::from_secs(10), idle);
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            Ok(format!(
                "{{\"code\":{},\"state_after\":{},\"retry_code\":{},\"idle\":{reached},\"ms_to_idle\":{ms:.3}}}",
                js(&name(rc)),
                js(after),
                retried.map_or("null".to_owned(), |r| js(&r)),
            ))
        }

        /// Destroys everything (the context must be IDLE or never started).
        fn destroy(self) {
            // SAFETY: (every call) each object is destroyed once, after what depends on it.
            unsafe {
                doca_rdma_destroy(self.rdma);
                doca_pe_destroy(self.pe);
                doca_buf_inventory_stop(self.inv);
                doca_buf_inventory_destroy(self.inv);
                doca_mmap_stop(self.mmap);
                doca_mmap_destroy(self.mmap);
            }
        }

        /// Mean and median receive latency (µs) of `ROUND_TRIPS` empty messages to itself,
        /// sleeping on the handle between progress calls: `per_poll` arms on every poll (the
        /// transport before issue 22), otherwise arms once before each sleep. Also counts
        /// the arms.
        fn latency(&mut self, per_poll: bool) -> Res<String> {
            let mut samples = Vec::new();
            let mut arms = 0u64;
            let mut armed = false;
            for k in 0..u64::from(ROUND_TRIPS) {
                let user = 1_000_000 + k + if per_poll { 0 } else { 500_000 };
                self.post_recv(user)?;
                let t0 = Instant::now();
                self.send(user + SEND_TAG)?;
                let end = t0 + Duration::from_secs(5);
                loop {
                    self.progress();
                    if per_poll {
                        self.arm();
                        arms += 1;
                        self.progress();
                    }
                    if self.seen(user).is_some() && self.seen(user + SEND_TAG).is_some() {
                        break;
                    }
                    if !per_poll && !armed {
                        self.arm();
                        arms += 1;
                        armed = true;
                        if self.progress() {
                            continue;
                        }
                    }
                    if Instant::now() > end {
                        return Err("a round trip took more than 5 s".to_owned());
                    }
                    if self.readable(100) {
                        armed = false;
                        if !self.progress_all {
                            // SAFETY: the PE is alive and its handle fired.
                            unsafe { doca_pe_clear_notification(self.pe, self.fd) };
                        }
                    }
                }
                samples.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            samples.sort_by(f64::total_cmp);
            let mean = samples.iter().sum::<f64>() / samples.len() as f64;
            Ok(format!(
                "{{\"round_trips\":{ROUND_TRIPS},\"mean_us\":{mean:.2},\"median_us\":{:.2},\"arms\":{arms}}}",
                samples[samples.len() / 2]
            ))
        }
    }

    fn caps(dev: *mut doca_dev) -> String {
        // SAFETY: the device is open; its devinfo lives as long as it does.
        let info = unsafe { doca_dev_as_devinfo(dev) };
        let (mut msg, mut sq, mut rq) = (0u32, 0u32, 0u32);
        // SAFETY: info is live; out pointers are valid.
        let (a, b, c) = unsafe {
            (
                doca_rdma_cap_get_max_message_size(info, &mut msg),
                doca_rdma_cap_get_max_send_queue_size(info, &mut sq),
                doca_rdma_cap_get_max_recv_queue_size(info, &mut rq),
            )
        };
        let v = |rc: doca_error_t, n: u32| {
            if rc == doca_error::DOCA_SUCCESS {
                n.to_string()
            } else {
                js(&name(rc))
            }
        };
        format!(
            "{{\"max_message_size\":{},\"max_send_queue_size\":{},\"max_recv_queue_size\":{}}}",
            v(a, msg),
            v(b, sq),
            v(c, rq)
        )
    }

    fn memlock() -> String {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: r is a valid out pointer.
        unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
        let f = |v: libc::rlim_t| {
            if v == libc::RLIM_INFINITY {
                js("unlimited")
            } else {
                v.to_string()
            }
        };
        let ipc_lock = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("CapEff:"))?.to_owned();
                u64::from_str_radix(line[7..].trim(), 16).ok()
            })
            .map(|caps| caps & (1 << 14) != 0);
        format!(
            "{{\"soft\":{},\"hard\":{},\"cap_ipc_lock\":{}}}",
            f(r.rlim_cur),
            f(r.rlim_max),
            ipc_lock.map_or("null".to_owned(), |b| b.to_string())
        )
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Res<Vec<u8>> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| e.to_string()))
            .collect()
    }

    /// The peer process: a context that connects to the parent's blob and then only lives.
    fn child(o: &Opts) -> Res<()> {
        let (dev, _) = open(o.device.as_deref())?;
        let mut c = Ctx::new(dev, o.gid_index)?;
        c.start();
        let blob = c.export()?;
        println!("{}", hex(&blob));
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        c.connect(&unhex(line.trim())?)?;
        for k in 0..8 {
            c.post_recv(k)?;
        }
        loop {
            c.progress();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Connects to a child process's context, checks one message gets through, kills the
    /// child and sends an empty message every 10 ms until one fails: its status and when.
    fn killed_peer(o: &Opts, dev: *mut doca_dev) -> Res<String> {
        let mut c = Ctx::new(dev, o.gid_index)?;
        c.start();
        let ours = c.export()?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut args = vec![
            "--child".to_owned(),
            "--gid-index".to_owned(),
            o.gid_index.to_string(),
        ];
        if let Some(d) = &o.device {
            args.extend(["--device".to_owned(), d.clone()]);
        }
        let mut kid = Command::new(exe)
            .args(&args)
            .env("DOCA_SIM_LEAK_REPORT", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the peer process: {e}"))?;
        let result = (|| {
            let mut line = String::new();
            let out = kid.stdout.take().ok_or("no child stdout")?;
            std::io::BufReader::new(out)
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            let theirs = unhex(line.trim())?;
            let mut stdin = kid.stdin.take().ok_or("no child stdin")?;
            writeln!(stdin, "{}", hex(&ours)).map_err(|e| e.to_string())?;
            c.connect(&theirs)?;
            c.send(1)?;
            if !c.progress_until(Duration::from_secs(10), |c| c.seen(1).is_some()) {
                return Err("the first message to the peer did not complete".to_owned());
            }
            kid.kill().map_err(|e| e.to_string())?;
            let _ = kid.wait();
            let t0 = Instant::now();
            let mut user = 2;
            loop {
                let submitted = c.send(user);
                c.progress();
                let failed = c
                    .log
                    .borrow()
                    .done
                    .iter()
                    .find(|(_, s)| *s != doca_error::DOCA_SUCCESS)
                    .copied();
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                if let Some((_, status)) = failed {
                    return Ok(format!(
                        "{{\"detected\":true,\"completion_status\":{},\"ms_to_detect\":{ms:.1}}}",
                        js(&name(status))
                    ));
                }
                if let Err(e) = submitted {
                    return Ok(format!(
                        "{{\"detected\":true,\"submit_error\":{},\"ms_to_detect\":{ms:.1}}}",
                        js(&e)
                    ));
                }
                if ms > 60_000.0 {
                    return Ok("{\"detected\":false,\"waited_ms\":60000}".to_owned());
                }
                user += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
        })();
        let _ = kid.kill();
        let _ = kid.wait();
        // Whatever is still in flight is flushed by the stop.
        let stopped = c.stop(false);
        c.destroy();
        let r = result?;
        stopped.map(|_| r)
    }

    fn run(o: &Opts) -> Res<String> {
        let (dev, ibdev) = open(o.device.as_deref())?;
        let mut fields = vec![
            ("doca_sys_found".to_owned(), js(FOUND)),
            (
                "doca_version".to_owned(),
                js(DOCA_VERSION.unwrap_or("unknown")),
            ),
            ("device".to_owned(), js(&ibdev)),
            ("gid_index".to_owned(), o.gid_index.to_string()),
            ("caps".to_owned(), caps(dev)),
            ("memlock".to_owned(), memlock()),
        ];
        for with_task in [false, true] {
            let mut c = Ctx::new(dev, o.gid_index)?;
            let (rc, state) = c.start();
            let blob = c.export()?;
            if !with_task {
                fields.push((
                    "progress_all_accepted".to_owned(),
                    c.progress_all.to_string(),
                ));
                fields.push((
                    "ctx_start".to_owned(),
                    format!("{{\"code\":{},\"state_after\":{}}}", js(&rc), js(state)),
                ));
                fields.push(("export_blob_bytes".to_owned(), blob.len().to_string()));
            }
            c.connect(&blob)?;
            if !with_task {
                fields.push(("latency_armed_per_poll".to_owned(), c.latency(true)?));
                fields.push(("latency_armed_before_sleep".to_owned(), c.latency(false)?));
            }
            let key = if with_task {
                "ctx_stop_with_allocated_task"
            } else {
                "ctx_stop_no_tasks"
            };
            fields.push((key.to_owned(), c.stop(with_task)?));
            c.destroy();
        }
        fields.push(("killed_peer".to_owned(), killed_peer(o, dev)?));
        // SAFETY: every context on the device is destroyed.
        unsafe { doca_dev_close(dev) };
        let body: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{}:{v}", js(k)))
            .collect();
        Ok(format!("{{{}}}", body.join(",")))
    }

    pub(super) fn main() {
        let mut o = Opts {
            device: None,
            gid_index: 0,
        };
        let mut is_child = false;
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--device" => o.device = args.next(),
                "--gid-index" => {
                    o.gid_index = args.next().and_then(|v| v.parse().ok()).unwrap_or(0)
                }
                "--child" => is_child = true,
                other => {
                    eprintln!(
                        "doca_hw_check: unknown argument {other} (--device IBDEV, --gid-index N)"
                    );
                    std::process::exit(2);
                }
            }
        }
        let r = if is_child {
            child(&o).map(|()| String::new())
        } else {
            run(&o)
        };
        match r {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("doca_hw_check: {e}");
                println!("{{\"error\":{}}}", js(&e));
                std::process::exit(1);
            }
        }
    }
}
