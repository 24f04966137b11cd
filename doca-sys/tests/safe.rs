//! Tests of the safe layer (`doca_sys::safe`) against the DOCA simulator: two contexts
//! exchange messages through the wrappers alone, every object is destroyed on drop, and a
//! context that never drains is leaked with its memory registration.

#[cfg(not(doca_sys_sim))]
#[test]
fn safe_layer_tests_skipped() {
    rdma_test_support::skip_or_fail(&format!(
        "the DOCA simulator is not built (found={}); run with DOCA_SYS_SIM=1 or --features sim",
        doca_sys::FOUND
    ));
}

#[cfg(doca_sys_sim)]
mod safe_tests {
    use doca_sys::safe::*;
    use doca_sys::{doca_access_flag, doca_ctx_states, doca_error, sim};
    use std::sync::{Mutex, MutexGuard};
    use std::time::{Duration, Instant};

    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> MutexGuard<'static, ()> {
        let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        sim::reset_config();
        guard
    }

    const SLOT: usize = 256;
    const SLOTS: usize = 4;
    const RUNNING: doca_ctx_states = doca_ctx_states::DOCA_CTX_STATE_RUNNING;
    const STARTING: doca_ctx_states = doca_ctx_states::DOCA_CTX_STATE_STARTING;
    const IDLE: doca_ctx_states = doca_ctx_states::DOCA_CTX_STATE_IDLE;

    #[derive(Default)]
    struct Events(Vec<TaskEvent>);

    impl TaskHandler for Events {
        fn on_task(&mut self, event: TaskEvent) {
            self.0.push(event);
        }
    }

    /// Field order is drop order: the context (with its tasks) first, the memory never
    /// (leaked: a leaked map must keep it).
    struct End {
        ctx: RdmaCtx<Events>,
        bufs: Vec<Buf>,
        _inventory: BufInventory,
        mmap: Mmap,
        mem: &'static mut [u8],
    }

    fn end() -> End {
        let dev = Dev::open_ibdev("mlx5_0").expect("open").expect("listed");
        let mem: &'static mut [u8] = Box::leak(vec![0u8; SLOT * SLOTS].into_boxed_slice());
        let rw = doca_access_flag::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE.0;
        // SAFETY: the memory is leaked, so it outlives the map.
        let mmap = unsafe { Mmap::new(&dev, &mut *mem, rw) }.expect("mmap");
        let inventory = BufInventory::new(SLOTS).expect("inventory");
        let bufs = (0..SLOTS)
            .map(|i| inventory.buf_by_addr(&mmap, i * SLOT, SLOT).expect("buf"))
            .collect();
        let mut pe = Pe::new().expect("pe");
        let all = pe.set_progress_all().is_ok();
        let n = SLOTS as u32;
        let mut ctx = RdmaCtx::new(&dev, pe, all, Events::default(), n, n).expect("ctx");
        ctx.set_permissions(rw).expect("permissions");
        ctx.set_transport_rc().expect("rc");
        ctx.set_grh_enabled(true).expect("grh");
        ctx.set_send_queue_size(n).expect("queue");
        End {
            ctx,
            bufs,
            _inventory: inventory,
            mmap,
            mem,
        }
    }

    fn progress_until(ctx: &mut RdmaCtx<Events>, done: impl Fn(&mut RdmaCtx<Events>) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(ctx) {
            assert!(
                Instant::now() < deadline,
                "timed out in state {:?}",
                ctx.state()
            );
            if !ctx.progress() {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    fn start(e: &mut End) -> Vec<u8> {
        match e.ctx.start() {
            Ok(()) => {}
            Err(err) => assert_eq!(err.code, doca_error::DOCA_ERROR_IN_PROGRESS, "{err}"),
        }
        progress_until(&mut e.ctx, |c| matches!(c.state(), RUNNING | STARTING));
        e.ctx.export().expect("export")
    }

    fn connected_pair() -> (End, End) {
        let (mut a, mut b) = (end(), end());
        let (blob_a, blob_b) = (start(&mut a), start(&mut b));
        a.ctx.connect(&blob_b).expect("connect a");
        b.ctx.connect(&blob_a).expect("connect b");
        let deadline = Instant::now() + Duration::from_secs(10);
        while a.ctx.state() != RUNNING || b.ctx.state() != RUNNING {
            assert!(Instant::now() < deadline, "never RUNNING");
            a.ctx.progress();
            b.ctx.progress();
        }
        (a, b)
    }

    fn stop(e: &mut End) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut asked = false;
        while e.ctx.state() != IDLE {
            assert!(Instant::now() < deadline, "never IDLE");
            e.ctx.free_idle_tasks();
            if !asked {
                asked = e.ctx.stop().is_ok();
            }
            e.ctx.progress();
        }
    }

    #[test]
    fn messages_cross_through_the_wrappers_and_everything_is_destroyed_on_drop() {
        let _g = serial();
        let live = sim::live_objects();
        let (mut tx, mut rx) = connected_pair();
        let recv = rx.ctx.alloc_recv(Some(&rx.bufs[1]), 7).expect("recv task");
        let send = tx.ctx.alloc_send(None, 9).expect("send task");
        // SAFETY: the buf is reset while no task is in flight; its memory is not read until
        // the receive completes.
        unsafe { rx.bufs[1].reset_data_len() }.expect("reset");
        // SAFETY: as above.
        unsafe { rx.ctx.submit(recv) }.expect("submit recv");
        // SAFETY: an in-flight task is refused before DOCA sees it.
        let again = unsafe { rx.ctx.submit(recv) }.expect_err("double submit");
        assert_eq!(again.code, doca_error::DOCA_ERROR_IN_USE);
        assert!(rx.ctx.in_flight(recv));
        tx.mem[2 * SLOT..2 * SLOT + 5].copy_from_slice(b"hello");
        tx.ctx
            .set_send_source(send, Some((&tx.bufs[2], 5)))
            .expect("source");
        // SAFETY: the sent slot is not written until the send completes.
        unsafe { tx.ctx.submit(send) }.expect("submit send");
        progress_until(&mut rx.ctx, |c| !c.handler().0.is_empty());
        progress_until(&mut tx.ctx, |c| !c.handler().0.is_empty());
        assert_eq!(
            rx.ctx.handler().0,
            [TaskEvent::RecvDone { user: 7, len: 5 }]
        );
        assert_eq!(tx.ctx.handler().0, [TaskEvent::SendDone { user: 9 }]);
        assert!(!rx.ctx.in_flight(recv));
        assert_eq!(&rx.mem[SLOT..SLOT + 5], b"hello");
        // A window beyond the buf is refused by the wrapper.
        let big = tx.ctx.set_send_source(send, Some((&tx.bufs[2], SLOT + 1)));
        assert_eq!(
            big.expect_err("too big").code,
            doca_error::DOCA_ERROR_INVALID_VALUE
        );
        let dereg = tx.mmap.deregistration();
        stop(&mut tx);
        stop(&mut rx);
        drop((tx, rx));
        assert!(dereg.done(), "the map was destroyed");
        assert_eq!(sim::live_objects(), live, "{}", sim::report());
    }

    /// A resume's restart: after a stop the connection is gone (no send task until a new
    /// export), the tasks of the earlier run name no task, and a new export and connect carry
    /// messages with new tasks; nothing is left behind.
    #[test]
    fn a_restart_forgets_the_connection_and_the_earlier_tasks_and_connects_again() {
        let _g = serial();
        let live = sim::live_objects();
        let (mut tx, mut rx) = connected_pair();
        let old_send = tx.ctx.alloc_send(None, 1).expect("send task");
        let old_recv = rx.ctx.alloc_recv(None, 2).expect("recv task");
        // SAFETY: an empty receive: no memory.
        unsafe { rx.ctx.submit(old_recv) }.expect("submit recv");
        stop(&mut tx);
        stop(&mut rx);
        assert_eq!(
            rx.ctx.handler().0,
            [TaskEvent::RecvFailed {
                user: 2,
                status: doca_error::DOCA_ERROR_IO_FAILED
            }],
            "the stop flushes the posted receive"
        );
        rx.ctx.handler().0.clear();
        let err = tx.ctx.alloc_send(None, 3).expect_err("no connection");
        assert_eq!(err.code, doca_error::DOCA_ERROR_NOT_CONNECTED);
        let (blob_tx, blob_rx) = (start(&mut tx), start(&mut rx));
        tx.ctx.connect(&blob_rx).expect("connect tx");
        rx.ctx.connect(&blob_tx).expect("connect rx");
        progress_until(&mut tx.ctx, |c| c.state() == RUNNING);
        progress_until(&mut rx.ctx, |c| c.state() == RUNNING);
        let send = tx.ctx.alloc_send(None, 4).expect("send task");
        let recv = rx.ctx.alloc_recv(None, 5).expect("recv task");
        assert!(send != old_send && recv != old_recv, "new task numbers");
        assert!(!tx.ctx.is_allocated(old_send) && !rx.ctx.is_allocated(old_recv));
        // SAFETY: a task of the earlier run is refused before DOCA sees it.
        let stale = unsafe { tx.ctx.submit(old_send) }.expect_err("stale handle");
        assert_eq!(stale.code, doca_error::DOCA_ERROR_IN_USE);
        // SAFETY: empty messages: no memory.
        unsafe { rx.ctx.submit(recv) }.expect("submit recv");
        // SAFETY: as above.
        unsafe { tx.ctx.submit(send) }.expect("submit send");
        progress_until(&mut rx.ctx, |c| !c.handler().0.is_empty());
        progress_until(&mut tx.ctx, |c| !c.handler().0.is_empty());
        assert_eq!(
            rx.ctx.handler().0,
            [TaskEvent::RecvDone { user: 5, len: 0 }]
        );
        assert_eq!(tx.ctx.handler().0, [TaskEvent::SendDone { user: 4 }]);
        stop(&mut tx);
        stop(&mut rx);
        drop((tx, rx));
        assert_eq!(sim::live_objects(), live, "{}", sim::report());
    }

    #[test]
    fn a_buf_outside_its_map_is_refused() {
        let _g = serial();
        let e = end();
        let inventory = BufInventory::new(1).expect("inventory");
        let err = inventory
            .buf_by_data(&e.mmap, SLOT * SLOTS - 8, 9)
            .expect_err("outside");
        assert_eq!(err.call, "doca_buf_inventory_buf_get_by_data");
        assert_eq!(err.code, doca_error::DOCA_ERROR_INVALID_VALUE);
    }

    #[test]
    fn a_context_that_never_drains_is_leaked_with_its_registration() {
        let _g = serial();
        let (mut tx, mut rx) = connected_pair();
        let recv = rx.ctx.alloc_recv(Some(&rx.bufs[0]), 1).expect("recv task");
        // SAFETY: the receive's memory is not touched (it is leaked below).
        unsafe { rx.ctx.submit(recv) }.expect("submit");
        sim::set_faults("doca_ctx_stop:1+:DOCA_ERROR_DRIVER").expect("faults");
        assert!(rx.ctx.stop().is_err());
        let dereg = rx.mmap.deregistration();
        let live = sim::live_objects();
        drop(rx);
        assert!(!dereg.done(), "a leaked context keeps its map registered");
        // Only the bufs no task ever carried were returned.
        assert_eq!(sim::live_objects(), live - (SLOTS - 1), "{}", sim::report());
        // The receive in flight is kept (freeing it would be DOCA's use after free).
        assert!(sim::report().contains("\"task\":1"), "{}", sim::report());
        sim::set_faults("").expect("faults");
        stop(&mut tx);
        drop(tx);
    }
}
