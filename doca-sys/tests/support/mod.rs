//! Helpers for the simulator tests: one `Endpoint` = device + PE + RDMA context + one
//! registered memory region + buffer inventory, driven through the raw bindings exactly as
//! the DOCA transport will drive them.
#![allow(dead_code)]

use doca_sys::*;
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::ffi::CStr;
use std::os::raw::c_void;
use std::ptr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Every test holds this: the simulator's leak counter and settings are process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

/// Serialize tests and start each from the environment's settings.
pub fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    sim::reset_config();
    guard
}

/// The name of a status code, e.g. "DOCA_ERROR_BAD_STATE".
pub fn name(rc: doca_error_t) -> String {
    // SAFETY: doca_error_get_name accepts any value and returns a static C string.
    unsafe { CStr::from_ptr(doca_error_get_name(rc)) }
        .to_string_lossy()
        .into_owned()
}

/// Assert a call returned `want`, showing names on failure.
#[track_caller]
pub fn expect(rc: doca_error_t, want: doca_error_t) {
    assert_eq!(rc, want, "got {} want {}", name(rc), name(want));
}

/// Assert success.
#[track_caller]
pub fn ok(rc: doca_error_t) {
    expect(rc, doca_error::DOCA_SUCCESS);
}

pub const SUCCESS: doca_error_t = doca_error::DOCA_SUCCESS;

pub fn data_ptr(p: *mut c_void) -> doca_data {
    doca_data { ptr: p }
}

pub fn data_u64(v: u64) -> doca_data {
    doca_data { u64_: v }
}

// ----------------------------------------------------------------------------- events

/// What a callback saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Send {
        task: usize,
        status: doca_error_t,
        user: u64,
    },
    Recv {
        task: usize,
        status: doca_error_t,
        user: u64,
        len: Option<u32>,
    },
    State {
        prev: doca_ctx_states,
        next: doca_ctx_states,
    },
}

/// Reached through the context's user data.
#[derive(Default)]
pub struct Events {
    pub log: Vec<Ev>,
    /// Task callbacks that ran outside doca_pe_progress (must stay 0).
    pub outside_progress: u32,
}

thread_local! {
    static IN_PROGRESS: Cell<bool> = const { Cell::new(false) };
}

fn events_of(ctx_user_data: doca_data) -> &'static RefCell<Events> {
    // SAFETY: every test context's user data is the address of a RefCell<Events> boxed in
    // its Endpoint, which outlives the context.
    unsafe { &*(ctx_user_data.ptr as *const RefCell<Events>) }
}

fn note_task_callback(ev: &RefCell<Events>) {
    if !IN_PROGRESS.with(|p| p.get()) {
        ev.borrow_mut().outside_progress += 1;
    }
}

fn task_status(task: *const doca_task) -> doca_error_t {
    // SAFETY: called from a completion callback with the task DOCA handed back.
    unsafe { doca_task_get_status(task) }
}

unsafe extern "C" fn on_send(task: *mut doca_rdma_task_send, tud: doca_data, cud: doca_data) {
    let ev = events_of(cud);
    note_task_callback(ev);
    // SAFETY: task is the live send task this callback reports.
    let status = task_status(unsafe { doca_rdma_task_send_as_task(task) });
    // SAFETY: test tasks carry a u64 user value.
    let user = unsafe { tud.u64_ };
    ev.borrow_mut().log.push(Ev::Send {
        task: task as usize,
        status,
        user,
    });
}

unsafe extern "C" fn on_recv(task: *mut doca_rdma_task_receive, tud: doca_data, cud: doca_data) {
    let ev = events_of(cud);
    note_task_callback(ev);
    // SAFETY: task is the live receive task this callback reports.
    let status = task_status(unsafe { doca_rdma_task_receive_as_task(task) });
    let len = if status == SUCCESS {
        // SAFETY: the result length is valid in the success callback.
        Some(unsafe { doca_rdma_task_receive_get_result_len(task) })
    } else {
        None
    };
    // SAFETY: test tasks carry a u64 user value.
    let user = unsafe { tud.u64_ };
    ev.borrow_mut().log.push(Ev::Recv {
        task: task as usize,
        status,
        user,
        len,
    });
}

unsafe extern "C" fn on_state(
    ud: doca_data,
    _ctx: *mut doca_ctx,
    prev: doca_ctx_states,
    next: doca_ctx_states,
) {
    events_of(ud)
        .borrow_mut()
        .log
        .push(Ev::State { prev, next });
}

// ----------------------------------------------------------------------------- endpoint

/// How to build an endpoint.
#[derive(Clone)]
pub struct Opts {
    /// ibdev name to open (None: the first device).
    pub device: Option<&'static str>,
    pub grh: bool,
    pub rnr_retry: u8,
    pub send_tasks: u32,
    pub recv_tasks: u32,
    pub mem_len: usize,
    pub bufs: usize,
    pub mmap_permissions: u32,
    /// `doca_rdma_set_send_queue_size` (None: the default of 64).
    pub send_queue: Option<u32>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            device: None,
            grh: true,
            rnr_retry: 7,
            send_tasks: 16,
            recv_tasks: 16,
            mem_len: 64 * 1024,
            bufs: 64,
            mmap_permissions: doca_access_flag::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE.0,
            send_queue: None,
        }
    }
}

/// One side of a connection.
pub struct Endpoint {
    pub dev: *mut doca_dev,
    pub pe: *mut doca_pe,
    pub rdma: *mut doca_rdma,
    pub ctx: *mut doca_ctx,
    pub mmap: *mut doca_mmap,
    pub inv: *mut doca_buf_inventory,
    pub conn: *mut doca_rdma_connection,
    pub mem: Vec<u8>,
    pub events: Box<RefCell<Events>>,
    /// Tasks allocated and not freed.
    pub tasks: Vec<*mut doca_task>,
    /// Tasks submitted whose callback has not been seen.
    pub inflight: HashSet<usize>,
    /// Bufs taken and not returned.
    pub bufs: Vec<*mut doca_buf>,
    seen: usize,
}

/// Open the device named `want` (or the first one).
pub fn open_device(want: Option<&str>) -> *mut doca_dev {
    let mut list: *mut *mut doca_devinfo = ptr::null_mut();
    let mut n = 0u32;
    // SAFETY: out pointers are valid.
    ok(unsafe { doca_devinfo_create_list(&mut list, &mut n) });
    let mut dev = ptr::null_mut();
    for i in 0..n as usize {
        // SAFETY: list holds n entries.
        let info = unsafe { *list.add(i) };
        let mut buf = [0 as std::os::raw::c_char; DOCA_DEVINFO_IBDEV_NAME_SIZE as usize];
        // SAFETY: buf has the documented size.
        ok(unsafe { doca_devinfo_get_ibdev_name(info, buf.as_mut_ptr(), buf.len() as u32) });
        // SAFETY: the simulator NUL-terminates within buf.
        let got = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        if want.map_or(true, |w| w == got) {
            // SAFETY: info is a live list entry.
            ok(unsafe { doca_dev_open(info, &mut dev) });
            break;
        }
    }
    // SAFETY: list came from doca_devinfo_create_list.
    ok(unsafe { doca_devinfo_destroy_list(list) });
    assert!(!dev.is_null(), "device {want:?} not found");
    dev
}

impl Endpoint {
    /// Everything up to (not including) doca_ctx_start.
    pub fn new(opts: &Opts) -> Endpoint {
        let dev = open_device(opts.device);
        let mut ep = Endpoint {
            dev,
            pe: ptr::null_mut(),
            rdma: ptr::null_mut(),
            ctx: ptr::null_mut(),
            mmap: ptr::null_mut(),
            inv: ptr::null_mut(),
            conn: ptr::null_mut(),
            mem: vec![0u8; opts.mem_len],
            events: Box::default(),
            tasks: Vec::new(),
            inflight: HashSet::new(),
            bufs: Vec::new(),
            seen: 0,
        };
        // SAFETY: every pointer passed below is either an out pointer into `ep` or an object
        // created just before; the memory range is ep.mem, which lives as long as ep.
        unsafe {
            ok(doca_mmap_create(&mut ep.mmap));
            ok(doca_mmap_set_permissions(ep.mmap, opts.mmap_permissions));
            ok(doca_mmap_set_memrange(
                ep.mmap,
                ep.mem.as_mut_ptr().cast(),
                ep.mem.len(),
            ));
            ok(doca_mmap_add_dev(ep.mmap, dev));
            ok(doca_mmap_start(ep.mmap));
            ok(doca_buf_inventory_create(opts.bufs, &mut ep.inv));
            ok(doca_buf_inventory_start(ep.inv));
            ok(doca_pe_create(&mut ep.pe));
            ok(doca_rdma_create(dev, &mut ep.rdma));
            ep.ctx = doca_rdma_as_ctx(ep.rdma);
            ok(doca_rdma_set_permissions(
                ep.rdma,
                doca_access_flag::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE.0,
            ));
            ok(doca_rdma_set_gid_index(ep.rdma, 3));
            ok(doca_rdma_set_grh_enabled(ep.rdma, u8::from(opts.grh)));
            ok(doca_rdma_set_transport_type(
                ep.rdma,
                doca_rdma_transport_type::DOCA_RDMA_TRANSPORT_TYPE_RC,
            ));
            ok(doca_rdma_set_max_num_connections(ep.rdma, 1));
            ok(doca_rdma_set_rnr_retry_count(ep.rdma, opts.rnr_retry));
            if let Some(n) = opts.send_queue {
                ok(doca_rdma_set_send_queue_size(ep.rdma, n));
            }
            ok(doca_rdma_task_send_set_conf(
                ep.rdma,
                Some(on_send),
                Some(on_send),
                opts.send_tasks,
            ));
            ok(doca_rdma_task_receive_set_conf(
                ep.rdma,
                Some(on_recv),
                Some(on_recv),
                opts.recv_tasks,
            ));
            ok(doca_ctx_set_user_data(
                ep.ctx,
                data_ptr(&*ep.events as *const RefCell<Events> as *mut c_void),
            ));
            ok(doca_ctx_set_state_changed_cb(ep.ctx, Some(on_state)));
            ok(doca_pe_connect_ctx(ep.pe, ep.ctx));
        }
        ep
    }

    /// A started endpoint: RUNNING (synchronous start) or STARTING (asynchronous start,
    /// RUNNING once connected and progressed: see [`Endpoint::wait_running`]).
    pub fn running(opts: &Opts) -> Endpoint {
        let ep = Endpoint::new(opts);
        ep.start();
        ep
    }

    /// doca_ctx_start: DOCA_SUCCESS (synchronous) or DOCA_ERROR_IN_PROGRESS (asynchronous).
    pub fn start(&self) {
        // SAFETY: ctx is live.
        let rc = unsafe { doca_ctx_start(self.ctx) };
        assert!(
            rc == SUCCESS || rc == doca_error::DOCA_ERROR_IN_PROGRESS,
            "doca_ctx_start: {}",
            name(rc)
        );
    }

    /// After doca_rdma_connect: progress until the context is RUNNING (at once with a
    /// synchronous start).
    pub fn wait_running(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.state() != doca_ctx_states::DOCA_CTX_STATE_RUNNING {
            assert!(Instant::now() < deadline, "context never reached RUNNING");
            if !self.progress() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    pub fn state(&self) -> doca_ctx_states {
        let mut s = doca_ctx_states::DOCA_CTX_STATE_IDLE;
        // SAFETY: ctx is live; s is writable.
        ok(unsafe { doca_ctx_get_state(self.ctx, &mut s) });
        s
    }

    /// Export a connection; returns a copy of the blob.
    pub fn export(&mut self) -> Vec<u8> {
        let mut blob: *const c_void = ptr::null();
        let mut len = 0usize;
        // SAFETY: out pointers are valid; the blob stays owned by DOCA, we copy it.
        ok(unsafe { doca_rdma_export(self.rdma, &mut blob, &mut len, &mut self.conn) });
        // SAFETY: DOCA returned len readable bytes at blob.
        unsafe { std::slice::from_raw_parts(blob.cast::<u8>(), len) }.to_vec()
    }

    pub fn try_connect(&mut self, blob: &[u8]) -> doca_error_t {
        // SAFETY: blob is readable for blob.len() bytes; conn came from export.
        unsafe { doca_rdma_connect(self.rdma, blob.as_ptr().cast(), blob.len(), self.conn) }
    }

    pub fn connect(&mut self, blob: &[u8]) {
        ok(self.try_connect(blob));
    }

    /// A buf over mem[off..off+len) with data window [off, off+data_len).
    pub fn buf(&mut self, off: usize, len: usize, data_len: usize) -> *mut doca_buf {
        assert!(off + len <= self.mem.len());
        let mut b = ptr::null_mut();
        // SAFETY: the range lies inside the registered memory; the out pointer is valid.
        ok(unsafe {
            let head = self.mem.as_mut_ptr().add(off).cast();
            doca_buf_inventory_buf_get_by_args(
                self.inv, self.mmap, head, len, head, data_len, &mut b,
            )
        });
        self.bufs.push(b);
        b
    }

    /// Write bytes into the memory behind a buf's data window and set its data length.
    pub fn fill(&mut self, b: *mut doca_buf, bytes: &[u8]) {
        let mut head: *mut c_void = ptr::null_mut();
        // SAFETY: b is a live buf of this endpoint.
        ok(unsafe { doca_buf_get_head(b, &mut head) });
        let off = head as usize - self.mem.as_ptr() as usize;
        self.mem[off..off + bytes.len()].copy_from_slice(bytes);
        // SAFETY: b is live; the window lies inside it (asserted by the simulator).
        ok(unsafe { doca_buf_set_data(b, head, bytes.len()) });
    }

    /// The bytes of a buf's data window.
    pub fn data(&self, b: *mut doca_buf) -> Vec<u8> {
        let mut data: *mut c_void = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: b is a live buf of this endpoint; out pointers are valid.
        unsafe {
            ok(doca_buf_get_data(b, &mut data));
            ok(doca_buf_get_data_len(b, &mut len));
        }
        let off = data as usize - self.mem.as_ptr() as usize;
        self.mem[off..off + len].to_vec()
    }

    pub fn put_buf(&mut self, b: *mut doca_buf) {
        // SAFETY: b was taken by this endpoint and not returned yet.
        ok(unsafe { doca_buf_dec_refcount(b, ptr::null_mut()) });
        self.bufs.retain(|x| *x != b);
    }

    pub fn alloc_recv(&mut self, dst: *mut doca_buf, user: u64) -> *mut doca_rdma_task_receive {
        let mut t = ptr::null_mut();
        // SAFETY: rdma is live, dst is a live buf or NULL, out pointer valid.
        ok(unsafe { doca_rdma_task_receive_allocate_init(self.rdma, dst, data_u64(user), &mut t) });
        // SAFETY: t was just allocated.
        self.tasks
            .push(unsafe { doca_rdma_task_receive_as_task(t) });
        t
    }

    pub fn alloc_send(&mut self, src: *mut doca_buf, user: u64) -> *mut doca_rdma_task_send {
        let mut t = ptr::null_mut();
        // SAFETY: rdma and conn are live, src is a live buf or NULL, out pointer valid.
        ok(unsafe {
            doca_rdma_task_send_allocate_init(self.rdma, self.conn, src, data_u64(user), &mut t)
        });
        // SAFETY: t was just allocated.
        self.tasks.push(unsafe { doca_rdma_task_send_as_task(t) });
        t
    }

    pub fn try_submit(&mut self, task: *mut doca_task) -> doca_error_t {
        // SAFETY: task is one of ours, owned by us (not in flight).
        let rc = unsafe { doca_task_submit(task) };
        if rc == SUCCESS {
            self.inflight.insert(task as usize);
        }
        rc
    }

    pub fn submit(&mut self, task: *mut doca_task) {
        ok(self.try_submit(task));
    }

    pub fn post_recv(&mut self, dst: *mut doca_buf, user: u64) -> *mut doca_rdma_task_receive {
        let t = self.alloc_recv(dst, user);
        // SAFETY: t was just allocated.
        self.submit(unsafe { doca_rdma_task_receive_as_task(t) });
        t
    }

    pub fn send(&mut self, src: *mut doca_buf, user: u64) -> *mut doca_rdma_task_send {
        let t = self.alloc_send(src, user);
        // SAFETY: t was just allocated.
        self.submit(unsafe { doca_rdma_task_send_as_task(t) });
        t
    }

    pub fn free_task(&mut self, task: *mut doca_task) {
        assert!(
            !self.inflight.contains(&(task as usize)),
            "freeing an in-flight task"
        );
        // SAFETY: task is ours and not in flight.
        unsafe { doca_task_free(task) };
        self.tasks.retain(|t| *t != task);
    }

    /// Free every task of ours that is not in flight.
    pub fn free_idle_tasks(&mut self) {
        let free: Vec<_> = self
            .tasks
            .iter()
            .copied()
            .filter(|t| !self.inflight.contains(&(*t as usize)))
            .collect();
        for t in free {
            self.free_task(t);
        }
    }

    /// One doca_pe_progress call.
    pub fn progress(&mut self) -> bool {
        IN_PROGRESS.with(|p| p.set(true));
        // SAFETY: pe is live; called from the thread that owns it.
        let made = unsafe { doca_pe_progress(self.pe) } != 0;
        IN_PROGRESS.with(|p| p.set(false));
        self.absorb();
        made
    }

    /// Forget in-flight marks of tasks whose callback ran.
    fn absorb(&mut self) {
        let ev = self.events.borrow();
        for e in &ev.log[self.seen..] {
            match e {
                Ev::Send { task, .. } | Ev::Recv { task, .. } => {
                    self.inflight.remove(task);
                }
                Ev::State { .. } => {}
            }
        }
        self.seen = ev.log.len();
    }

    pub fn log(&self) -> Vec<Ev> {
        self.events.borrow().log.clone()
    }

    /// Task events only.
    pub fn completions(&self) -> Vec<Ev> {
        self.log()
            .into_iter()
            .filter(|e| !matches!(e, Ev::State { .. }))
            .collect()
    }

    pub fn clear_log(&mut self) {
        self.events.borrow_mut().log.clear();
        self.seen = 0;
    }

    pub fn outside_progress(&self) -> u32 {
        self.events.borrow().outside_progress
    }

    /// Free every task not in flight, stop (if needed), progress until IDLE freeing every
    /// task that comes back, return every buf, and destroy everything in DOCA's order,
    /// asserting each step succeeds.
    pub fn teardown(mut self) {
        if self.state() != doca_ctx_states::DOCA_CTX_STATE_IDLE {
            self.free_idle_tasks();
            if matches!(
                self.state(),
                doca_ctx_states::DOCA_CTX_STATE_RUNNING | doca_ctx_states::DOCA_CTX_STATE_STARTING
            ) {
                // SAFETY: ctx is live.
                let rc = unsafe { doca_ctx_stop(self.ctx) };
                assert!(
                    rc == SUCCESS || rc == doca_error::DOCA_ERROR_IN_PROGRESS,
                    "doca_ctx_stop: {}",
                    name(rc)
                );
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.state() != doca_ctx_states::DOCA_CTX_STATE_IDLE {
                assert!(Instant::now() < deadline, "context never reached IDLE");
                self.free_idle_tasks();
                if !self.progress() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        assert!(self.tasks.is_empty(), "tasks left after IDLE");
        for b in self.bufs.clone() {
            self.put_buf(b);
        }
        // SAFETY: all objects are live and destroyed once, in DOCA's order.
        unsafe {
            ok(doca_rdma_destroy(self.rdma));
            ok(doca_pe_destroy(self.pe));
            ok(doca_buf_inventory_stop(self.inv));
            ok(doca_buf_inventory_destroy(self.inv));
            ok(doca_mmap_stop(self.mmap));
            ok(doca_mmap_destroy(self.mmap));
            ok(doca_dev_close(self.dev));
        }
        assert_eq!(self.outside_progress(), 0, "callbacks ran outside progress");
    }
}

/// Two started endpoints connected to each other, both RUNNING.
pub fn pair(a: &Opts, b: &Opts) -> (Endpoint, Endpoint) {
    let mut x = Endpoint::running(a);
    let mut y = Endpoint::running(b);
    let bx = x.export();
    let by = y.export();
    x.connect(&by);
    y.connect(&bx);
    x.wait_running();
    y.wait_running();
    (x, y)
}

/// Progress the endpoints until `done` holds; false on timeout.
pub fn progress_until(
    eps: &mut [&mut Endpoint],
    timeout: Duration,
    mut done: impl FnMut(&[&mut Endpoint]) -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done(eps) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        let mut any = false;
        for ep in eps.iter_mut() {
            any |= ep.progress();
        }
        if !any {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Completed task events of one kind with their statuses.
pub fn sends(ep: &Endpoint) -> Vec<(u64, doca_error_t)> {
    ep.log()
        .into_iter()
        .filter_map(|e| match e {
            Ev::Send { user, status, .. } => Some((user, status)),
            _ => None,
        })
        .collect()
}

pub fn recvs(ep: &Endpoint) -> Vec<(u64, doca_error_t, Option<u32>)> {
    ep.log()
        .into_iter()
        .filter_map(|e| match e {
            Ev::Recv {
                user, status, len, ..
            } => Some((user, status, len)),
            _ => None,
        })
        .collect()
}

/// Poll an fd for readability.
pub fn readable(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: p is a valid pollfd array of length 1.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    n == 1 && (p.revents & libc::POLLIN) != 0
}

/// Run this test binary again as a child running only `test`, with extra environment.
pub fn run_child(test: &str, env: &[(&str, &str)]) -> std::process::Output {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"]);
    cmd.env("DOCA_SIM_TEST_CHILD", "1");
    // Some tests read the child's diagnostics.
    cmd.env_remove("DOCA_SIM_QUIET");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("spawn child test process")
}

/// Whether this process is a child started by `run_child`.
pub fn is_child() -> bool {
    std::env::var_os("DOCA_SIM_TEST_CHILD").is_some()
}

/// A fresh private directory under the target's tmp dir.
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    let base = std::env::temp_dir();
    let dir = base.join(format!(
        "doca-sys-test-{tag}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Wait for a file to appear and return its contents.
pub fn wait_file(path: &std::path::Path, timeout: Duration) -> Vec<u8> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(b) = std::fs::read(path) {
            return b;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Write a file atomically (the peer polls for it).
pub fn put_file(path: &std::path::Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}
