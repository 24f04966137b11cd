//! Tests of the DOCA simulator itself: each proves one of DOCA's documented rules that
//! the simulator enforces, through the same bindings the DOCA transport uses.
//! Run with `DOCA_SYS_SIM=1 cargo test -p doca-sys` (or `--features doca-sys/sim`).

#[cfg(not(doca_sys_sim))]
#[test]
fn simulator_tests_skipped() {
    rdma_test_support::skip_or_fail(&format!(
        "the DOCA simulator is not built (found={}); run with DOCA_SYS_SIM=1 or --features sim",
        doca_sys::FOUND
    ));
}

#[cfg(doca_sys_sim)]
mod support;

#[cfg(doca_sys_sim)]
mod sim_tests {
    use super::support::*;
    use doca_sys::*;
    use std::ffi::CStr;
    use std::os::raw::c_void;
    use std::ptr;
    use std::time::{Duration, Instant};

    const IDLE: doca_ctx_states = doca_ctx_states::DOCA_CTX_STATE_IDLE;
    const STARTING: doca_ctx_states = doca_ctx_states::DOCA_CTX_STATE_STARTING;
    const RUNNING: doca_ctx_states = doca_ctx_states::DOCA_CTX_STATE_RUNNING;
    const STOPPING: doca_ctx_states = doca_ctx_states::DOCA_CTX_STATE_STOPPING;
    const BAD_STATE: doca_error_t = doca_error::DOCA_ERROR_BAD_STATE;
    const IO_FAILED: doca_error_t = doca_error::DOCA_ERROR_IO_FAILED;
    const T: Duration = Duration::from_secs(10);

    fn as_task_s(t: *mut doca_rdma_task_send) -> *mut doca_task {
        // SAFETY: conversion of a live send task.
        unsafe { doca_rdma_task_send_as_task(t) }
    }

    /// Export a connection and connect it to itself (a loopback QP): enough for a test that
    /// only needs the context connected.
    ///
    /// # Safety
    /// `rdma` is a live, started context.
    unsafe fn self_connect(rdma: *mut doca_rdma) {
        let mut blob: *const c_void = ptr::null();
        let mut len = 0usize;
        let mut conn = ptr::null_mut();
        // SAFETY: out pointers valid; the blob is read before the next export.
        unsafe {
            ok(doca_rdma_export(rdma, &mut blob, &mut len, &mut conn));
            ok(doca_rdma_connect(rdma, blob, len, conn));
        }
    }

    fn as_task_r(t: *mut doca_rdma_task_receive) -> *mut doca_task {
        // SAFETY: conversion of a live receive task.
        unsafe { doca_rdma_task_receive_as_task(t) }
    }

    #[test]
    fn build_reports_the_simulator() {
        assert_eq!(FOUND, "sim");
        assert_eq!(DOCA_VERSION, Some("3.1.0-sim"));
        const { assert!(AVAILABLE && SIMULATED) };
    }

    #[test]
    fn every_bound_function_is_implemented() {
        let fns = function_addresses();
        assert!(fns.len() >= 80, "{} functions", fns.len());
        for (name, addr) in fns {
            assert_ne!(addr, 0, "{name}");
        }
    }

    #[test]
    fn error_names_and_descriptions() {
        let _g = serial();
        assert_eq!(
            name(doca_error::DOCA_ERROR_BAD_STATE),
            "DOCA_ERROR_BAD_STATE"
        );
        assert_eq!(name(SUCCESS), "DOCA_SUCCESS");
        assert_eq!(name(doca_error::DOCA_ERROR_SKIPPED), "DOCA_ERROR_SKIPPED");
        // DOCA 3.3 added 31; our enum stops at 30 (the 3.0 headers), the simulator names it.
        assert_eq!(name(doca_error(31)), "DOCA_ERROR_DEVICE_FATAL_ERROR");
        // An unknown code (newer runtime than headers) is harmless with newtype enums.
        assert!(!name(doca_error(999)).is_empty());
        // SAFETY: doca_error_get_descr returns a static string for any value.
        let descr = unsafe { CStr::from_ptr(doca_error_get_descr(doca_error::DOCA_ERROR_IN_USE)) };
        assert!(!descr.to_bytes().is_empty());
    }

    // ------------------------------------------------------------------ devices

    /// ibdev name, interface name (or error), IPv4 (or error) of every listed device.
    type DeviceRow = (
        String,
        Result<String, doca_error_t>,
        Result<[u8; 4], doca_error_t>,
    );

    fn device_names() -> Vec<DeviceRow> {
        let mut out = Vec::new();
        let mut list: *mut *mut doca_devinfo = ptr::null_mut();
        let mut n = 0u32;
        // SAFETY: out pointers valid; every entry is used before the list is destroyed.
        unsafe {
            ok(doca_devinfo_create_list(&mut list, &mut n));
            for i in 0..n as usize {
                let info = *list.add(i);
                let mut ib = [0 as std::os::raw::c_char; DOCA_DEVINFO_IBDEV_NAME_SIZE as usize];
                ok(doca_devinfo_get_ibdev_name(
                    info,
                    ib.as_mut_ptr(),
                    ib.len() as u32,
                ));
                let mut ifn = [0 as std::os::raw::c_char; DOCA_DEVINFO_IFACE_NAME_SIZE as usize];
                let rc = doca_devinfo_get_iface_name(info, ifn.as_mut_ptr(), ifn.len() as u32);
                let iface = if rc == SUCCESS {
                    Ok(CStr::from_ptr(ifn.as_ptr()).to_string_lossy().into_owned())
                } else {
                    Err(rc)
                };
                let mut ip = [0u8; 4];
                let rc = doca_devinfo_get_ipv4_addr(info, ip.as_mut_ptr(), 4);
                let ip = if rc == SUCCESS { Ok(ip) } else { Err(rc) };
                // Output buffers smaller than documented are refused.
                expect(
                    doca_devinfo_get_ibdev_name(info, ib.as_mut_ptr(), 8),
                    doca_error::DOCA_ERROR_INVALID_VALUE,
                );
                out.push((
                    CStr::from_ptr(ib.as_ptr()).to_string_lossy().into_owned(),
                    iface,
                    ip,
                ));
            }
            ok(doca_devinfo_destroy_list(list));
        }
        out
    }

    #[test]
    fn devices_come_from_the_test_provided_list() {
        let _g = serial();
        let default = device_names();
        assert_eq!(default.len(), 1);
        assert_eq!(default[0].0, "mlx5_0");

        sim::set_devices("mlx5_0:eth0:10.0.0.1,mlx5_1:eth1:10.0.1.1,ibp0::").unwrap();
        let devs = device_names();
        assert_eq!(devs.len(), 3);
        assert_eq!(devs[1].0, "mlx5_1");
        assert_eq!(devs[1].1, Ok("eth1".to_string()));
        assert_eq!(devs[1].2, Ok([10, 0, 1, 1]));
        assert_eq!(devs[2].1, Err(doca_error::DOCA_ERROR_NOT_FOUND));
        assert_eq!(devs[2].2, Err(doca_error::DOCA_ERROR_NOT_FOUND));

        // Opening the same device twice gives the same object and needs two closes.
        let a = open_device(Some("mlx5_1"));
        let b = open_device(Some("mlx5_1"));
        assert_eq!(a, b);
        // SAFETY: a/b are the same open device, closed once per open.
        unsafe {
            ok(doca_dev_close(a));
            ok(doca_dev_close(b));
        }
        assert!(sim::set_devices("a:b:not-an-ip").is_err());
        sim::set_devices("").unwrap();
        assert!(device_names().is_empty());
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    #[test]
    fn devices_from_the_environment() {
        if is_child() {
            let devs = device_names();
            assert_eq!(devs.len(), 2);
            assert_eq!(devs[1].0, "mlx5_9");
            assert_eq!(devs[1].2, Ok([192, 168, 7, 9]));
            return;
        }
        let out = run_child(
            "sim_tests::devices_from_the_environment",
            &[("DOCA_SIM_DEVICES", "mlx5_3:eth3,mlx5_9:ens9:192.168.7.9")],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // ------------------------------------------------------------------ state machine

    #[test]
    fn context_state_machine() {
        let _g = serial();
        // The synchronous start (RUNNING inside doca_ctx_start); the asynchronous one is
        // `asynchronous_start_runs_only_once_connected_and_progressed`.
        sim::set_start_async(false);
        let opts = Opts::default();
        let dev = open_device(None);
        let mut rdma = ptr::null_mut();
        let mut pe = ptr::null_mut();
        // SAFETY: objects are created and used in order; out pointers are valid.
        unsafe {
            ok(doca_rdma_create(dev, &mut rdma));
            ok(doca_pe_create(&mut pe));
            let ctx = doca_rdma_as_ctx(rdma);
            let mut st = RUNNING;
            ok(doca_ctx_get_state(ctx, &mut st));
            assert_eq!(st, IDLE);
            expect(doca_ctx_start(ctx), doca_error::DOCA_ERROR_NOT_CONNECTED);
            expect(doca_ctx_stop(ctx), doca_error::DOCA_ERROR_NOT_CONNECTED);
            ok(doca_pe_connect_ctx(pe, ctx));
            expect(
                doca_pe_connect_ctx(pe, ctx),
                doca_error::DOCA_ERROR_NOT_PERMITTED,
            );
            expect(doca_ctx_stop(ctx), BAD_STATE);
            // The CPU data path has no configurable receive queue.
            expect(
                doca_rdma_set_recv_queue_size(rdma, 64),
                doca_error::DOCA_ERROR_NOT_SUPPORTED,
            );
            expect(
                doca_rdma_set_rnr_retry_count(rdma, 8),
                doca_error::DOCA_ERROR_INVALID_VALUE,
            );
            // A service level is 4 bits; what was set reads back, as does the MTU.
            expect(
                doca_rdma_set_sl(rdma, 16),
                doca_error::DOCA_ERROR_INVALID_VALUE,
            );
            ok(doca_rdma_set_sl(rdma, 5));
            let mut sl = 0;
            ok(doca_rdma_get_sl(rdma, &mut sl));
            assert_eq!(sl, 5);
            ok(doca_rdma_set_mtu(
                rdma,
                doca_mtu_size::DOCA_MTU_SIZE_2K_BYTES,
            ));
            let mut mtu = doca_mtu_size::DOCA_MTU_SIZE_256_BYTES;
            ok(doca_rdma_get_mtu(rdma, &mut mtu));
            assert_eq!(mtu, doca_mtu_size::DOCA_MTU_SIZE_2K_BYTES);
            expect(
                doca_rdma_set_permissions(
                    rdma,
                    doca_access_flag::DOCA_ACCESS_FLAG_PCI_READ_WRITE.0,
                ),
                doca_error::DOCA_ERROR_INVALID_VALUE,
            );
            ok(doca_rdma_destroy(rdma));
            ok(doca_pe_destroy(pe));
            ok(doca_dev_close(dev));
        }

        let mut ep = Endpoint::new(&opts);
        // Before start: no export, no tasks.
        let mut blob: *const c_void = ptr::null();
        let mut len = 0;
        let mut conn = ptr::null_mut();
        let mut task = ptr::null_mut();
        // SAFETY: out pointers valid; objects live.
        unsafe {
            expect(
                doca_rdma_export(ep.rdma, &mut blob, &mut len, &mut conn),
                BAD_STATE,
            );
            expect(
                doca_rdma_task_receive_allocate_init(
                    ep.rdma,
                    ptr::null_mut(),
                    data_u64(0),
                    &mut task,
                ),
                BAD_STATE,
            );
        }
        ep.start();
        assert_eq!(ep.state(), RUNNING);
        // Synchronous start: the state callback already ran, from inside doca_ctx_start.
        assert_eq!(
            ep.log(),
            vec![Ev::State {
                prev: IDLE,
                next: RUNNING
            }]
        );
        // SAFETY: objects live; every call below must be refused while running.
        unsafe {
            expect(doca_ctx_start(ep.ctx), BAD_STATE);
            expect(doca_rdma_set_gid_index(ep.rdma, 1), BAD_STATE);
            expect(doca_rdma_set_grh_enabled(ep.rdma, 1), BAD_STATE);
            expect(doca_rdma_set_permissions(ep.rdma, 1), BAD_STATE);
            expect(doca_rdma_set_max_num_connections(ep.rdma, 1), BAD_STATE);
            expect(doca_rdma_set_rnr_retry_count(ep.rdma, 3), BAD_STATE);
            expect(doca_rdma_set_sl(ep.rdma, 3), BAD_STATE);
            expect(doca_rdma_set_send_queue_size(ep.rdma, 8), BAD_STATE);
            expect(doca_rdma_set_recv_queue_size(ep.rdma, 8), BAD_STATE);
            expect(
                doca_rdma_set_transport_type(
                    ep.rdma,
                    doca_rdma_transport_type::DOCA_RDMA_TRANSPORT_TYPE_RC,
                ),
                BAD_STATE,
            );
            expect(
                doca_rdma_set_mtu(ep.rdma, doca_mtu_size::DOCA_MTU_SIZE_1K_BYTES),
                BAD_STATE,
            );
            expect(
                doca_rdma_task_send_set_conf(ep.rdma, None, None, 4),
                BAD_STATE,
            );
            expect(
                doca_rdma_task_receive_set_conf(ep.rdma, None, None, 4),
                BAD_STATE,
            );
            expect(doca_pe_connect_ctx(ep.pe, ep.ctx), BAD_STATE);
            // Destroy order: not while running, not while a context is connected.
            expect(doca_rdma_destroy(ep.rdma), BAD_STATE);
            expect(doca_pe_destroy(ep.pe), doca_error::DOCA_ERROR_IN_USE);
            // RUNNING but not connected yet: no tasks.
            expect(
                doca_rdma_task_receive_allocate_init(
                    ep.rdma,
                    ptr::null_mut(),
                    data_u64(0),
                    &mut task,
                ),
                BAD_STATE,
            );
        }
        let mut peer = Endpoint::running(&opts);
        let bp = peer.export();
        let be = ep.export();
        ep.connect(&bp);
        peer.connect(&be);

        // Stop with a receive in flight: IN_PROGRESS, STOPPING, flushed through the error
        // callback only when progressed, IDLE only once every task is freed.
        let r = ep.post_recv(ptr::null_mut(), 7);
        ep.clear_log();
        // SAFETY: ctx live.
        expect(
            unsafe { doca_ctx_stop(ep.ctx) },
            doca_error::DOCA_ERROR_IN_PROGRESS,
        );
        assert_eq!(ep.state(), STOPPING);
        assert_eq!(
            ep.log(),
            vec![Ev::State {
                prev: RUNNING,
                next: STOPPING
            }]
        );
        let mut inflight = 0usize;
        // SAFETY: ctx live, out pointer valid.
        ok(unsafe { doca_ctx_get_num_inflight_tasks(ep.ctx, &mut inflight) });
        assert_eq!(inflight, 1);
        // SAFETY: no submit while stopping; the caller keeps the task.
        let t2 = ep.alloc_recv_after_stop();
        assert!(t2.is_none());
        assert!(ep.progress());
        assert_eq!(recvs(&ep), vec![(7, IO_FAILED, None)]);
        assert_eq!(ep.state(), STOPPING, "a task is still allocated");
        assert!(!ep.progress());
        ep.free_task(as_task_r(r));
        assert!(ep.progress());
        assert_eq!(ep.state(), IDLE);
        assert_eq!(
            ep.log().last(),
            Some(&Ev::State {
                prev: STOPPING,
                next: IDLE
            })
        );

        // Restartable; a new export is needed after a restart.
        ep.start();
        let _ = ep.export();
        // SAFETY: ctx live. Nothing in flight: stop completes at once.
        ok(unsafe { doca_ctx_stop(ep.ctx) });
        assert_eq!(ep.state(), IDLE);
        ep.teardown();
        peer.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// doca_ctx.h: an asynchronous start answers IN_PROGRESS and leaves the context
    /// STARTING, where it can export and connect but not allocate tasks; doca_pe_progress
    /// moves it to RUNNING once connected (doca_rdma.h, doca_rdma_connect).
    #[test]
    fn asynchronous_start_runs_only_once_connected_and_progressed() {
        let _g = serial();
        sim::set_start_async(true);
        let opts = Opts::default();
        let mut a = Endpoint::new(&opts);
        let mut b = Endpoint::new(&opts);
        // SAFETY: ctx live.
        expect(
            unsafe { doca_ctx_start(a.ctx) },
            doca_error::DOCA_ERROR_IN_PROGRESS,
        );
        b.start();
        assert_eq!(a.state(), STARTING);
        assert_eq!(
            a.log(),
            vec![Ev::State {
                prev: IDLE,
                next: STARTING
            }]
        );
        let mut task = ptr::null_mut();
        // SAFETY: rdma live, out pointer valid.
        let alloc_recv = |ep: &Endpoint, task: &mut *mut doca_rdma_task_receive| unsafe {
            doca_rdma_task_receive_allocate_init(ep.rdma, ptr::null_mut(), data_u64(0), task)
        };
        expect(alloc_recv(&a, &mut task), BAD_STATE);
        // Properties stay frozen while STARTING.
        // SAFETY: rdma live.
        expect(unsafe { doca_rdma_set_gid_index(a.rdma, 1) }, BAD_STATE);
        let ba = a.export();
        let bb = b.export();
        expect(alloc_recv(&a, &mut task), BAD_STATE);
        let mut send = ptr::null_mut();
        // SAFETY: rdma and conn live, out pointer valid.
        expect(
            unsafe {
                doca_rdma_task_send_allocate_init(
                    a.rdma,
                    a.conn,
                    ptr::null(),
                    data_u64(0),
                    &mut send,
                )
            },
            BAD_STATE,
        );
        a.connect(&bb);
        // Connected, but RUNNING only comes from progress.
        assert_eq!(a.state(), STARTING);
        expect(alloc_recv(&a, &mut task), BAD_STATE);
        // A second connect of the same connection is refused.
        expect(a.try_connect(&bb), BAD_STATE);
        assert!(a.progress());
        assert_eq!(a.state(), RUNNING);
        assert_eq!(
            a.log().last(),
            Some(&Ev::State {
                prev: STARTING,
                next: RUNNING
            })
        );
        b.connect(&ba);
        b.wait_running();
        // Now tasks can be allocated and messages flow.
        b.post_recv(ptr::null_mut(), 1);
        a.send(ptr::null_mut(), 1);
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| {
            sends(e[0]).len() == 1 && recvs(e[1]).len() == 1
        }));
        assert_eq!(recvs(&b), vec![(1, SUCCESS, Some(0))]);
        a.teardown();
        b.teardown();

        // Stop is allowed while STARTING (nothing allocated): straight back to IDLE, and
        // export/connect are refused again.
        let mut c = Endpoint::running(&opts);
        let _ = c.export();
        // SAFETY: ctx live.
        ok(unsafe { doca_ctx_stop(c.ctx) });
        assert_eq!(c.state(), IDLE);
        let mut blob: *const c_void = ptr::null();
        let mut len = 0;
        let mut conn = ptr::null_mut();
        // SAFETY: out pointers valid; rdma live.
        unsafe {
            expect(
                doca_rdma_export(c.rdma, &mut blob, &mut len, &mut conn),
                BAD_STATE,
            );
        }
        c.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// doca_rdma.h: with a synchronous start the context is RUNNING before any connection,
    /// yet tasks still wait for doca_rdma_connect.
    #[test]
    fn synchronous_start_still_allocates_tasks_only_after_connect() {
        let _g = serial();
        sim::set_start_async(false);
        let opts = Opts::default();
        let mut a = Endpoint::running(&opts);
        let mut b = Endpoint::running(&opts);
        assert_eq!(a.state(), RUNNING);
        let ba = a.export();
        let bb = b.export();
        let mut t = ptr::null_mut();
        // SAFETY: rdma and conn live, out pointers valid.
        unsafe {
            expect(
                doca_rdma_task_receive_allocate_init(a.rdma, ptr::null_mut(), data_u64(0), &mut t),
                BAD_STATE,
            );
            let mut s = ptr::null_mut();
            expect(
                doca_rdma_task_send_allocate_init(a.rdma, a.conn, ptr::null(), data_u64(0), &mut s),
                BAD_STATE,
            );
        }
        a.connect(&bb);
        b.connect(&ba);
        a.wait_running();
        let _r = a.alloc_recv(ptr::null_mut(), 1);
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// doca_pe.h: every task must be freed before the context is stopped; tasks flushed by
    /// the stop are freed as they come back.
    #[test]
    fn stop_with_allocated_tasks_is_refused() {
        let _g = serial();
        sim::set_stop_refuse(true);
        let (mut a, b) = pair(&Opts::default(), &Opts::default());
        let r = a.alloc_recv(ptr::null_mut(), 1);
        // SAFETY: ctx live.
        expect(
            unsafe { doca_ctx_stop(a.ctx) },
            doca_error::DOCA_ERROR_IN_USE,
        );
        assert_eq!(a.state(), RUNNING);
        a.free_task(as_task_r(r));
        // SAFETY: ctx live.
        ok(unsafe { doca_ctx_stop(a.ctx) });
        assert_eq!(a.state(), IDLE);
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// DOCA_SIM_STOP=accept (the default, as the SDK): a stop with a task still allocated is
    /// accepted; the context stays STOPPING until the task is freed, then progress reaches IDLE.
    #[test]
    fn stop_with_allocated_tasks_is_accepted_and_idle_once_freed() {
        let _g = serial();
        sim::set_stop_refuse(false);
        let (mut a, b) = pair(&Opts::default(), &Opts::default());
        let r = a.alloc_recv(ptr::null_mut(), 1);
        // SAFETY: ctx live.
        expect(
            unsafe { doca_ctx_stop(a.ctx) },
            doca_error::DOCA_ERROR_IN_PROGRESS,
        );
        assert_eq!(a.state(), STOPPING);
        assert!(!a.progress(), "nothing to do while the task is allocated");
        assert_eq!(a.state(), STOPPING);
        a.free_task(as_task_r(r));
        assert!(a.progress());
        assert_eq!(a.state(), IDLE);
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// DOCA_SIM_ARM: with `level`, arming with a completion pending raises the handle at once;
    /// with `edge`, it raises nothing for it (only progress finds it), and a later completion
    /// raises the handle.
    #[test]
    fn edge_arm_raises_only_for_later_completions() {
        for edge in [false, true] {
            let _g = serial();
            sim::set_arm_edge(edge);
            let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
            let mut fd = -1;
            // SAFETY: pe live, out pointer valid.
            ok(unsafe { doca_pe_get_notification_handle(b.pe, &mut fd) });
            b.post_recv(ptr::null_mut(), 1);
            b.post_recv(ptr::null_mut(), 2);
            a.send(ptr::null_mut(), 1);
            // The send completes once the receive landed: b's completion is pending.
            assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 1));
            // SAFETY: pe live.
            ok(unsafe { doca_pe_request_notification(b.pe) });
            assert_eq!(readable(fd, 50), !edge, "edge={edge}");
            if !edge {
                // SAFETY: pe live; the handle fired.
                ok(unsafe { doca_pe_clear_notification(b.pe, fd) });
            }
            assert!(b.progress());
            assert_eq!(recvs(&b).len(), 1);
            // SAFETY: pe live.
            ok(unsafe { doca_pe_request_notification(b.pe) });
            a.send(ptr::null_mut(), 2);
            assert!(
                readable(fd, 5000),
                "a later completion raises (edge={edge})"
            );
            // SAFETY: pe live; the handle fired.
            ok(unsafe { doca_pe_clear_notification(b.pe, fd) });
            assert!(progress_until(&mut [&mut b], T, |e| recvs(e[0]).len() == 2));
            a.teardown();
            b.teardown();
            assert_eq!(sim::live_objects(), 0, "{}", sim::report());
        }
    }

    /// DOCA_SIM_BATCH: one progress takes several completions from the CQ; those waiting in
    /// the engine raise no event when armed, and only progress delivers them.
    #[test]
    fn batch_mode_completions_in_the_engine_raise_no_event() {
        let _g = serial();
        sim::set_batch(4);
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
        let mut fd = -1;
        // SAFETY: pe live, out pointer valid.
        unsafe {
            ok(doca_pe_set_event_mode(
                b.pe,
                doca_pe_event_mode::DOCA_PE_EVENT_MODE_PROGRESS_ALL,
            ));
            ok(doca_pe_get_notification_handle(b.pe, &mut fd));
        }
        for i in 0..3 {
            b.post_recv(ptr::null_mut(), i);
        }
        for i in 0..3 {
            a.send(ptr::null_mut(), i);
        }
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 3));
        assert!(b.progress());
        assert_eq!(recvs(&b).len(), 1);
        // SAFETY: pe live.
        ok(unsafe { doca_pe_request_notification(b.pe) });
        assert!(!readable(fd, 50), "completions in the engine raise nothing");
        assert!(b.progress());
        assert!(b.progress());
        assert!(!b.progress());
        assert_eq!(recvs(&b).len(), 3);
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// The queue size capabilities report DOCA_SIM_MAX_SEND_QUEUE / _RECV_QUEUE (or
    /// sim::set_queue_caps), and a send queue above the cap is refused.
    #[test]
    fn queue_size_capabilities() {
        let _g = serial();
        sim::set_queue_caps(8, 16);
        let dev = open_device(None);
        let (mut send, mut recv) = (0u32, 0u32);
        // SAFETY: dev open; out pointers valid.
        unsafe {
            let info = doca_dev_as_devinfo(dev);
            ok(doca_rdma_cap_get_max_send_queue_size(info, &mut send));
            ok(doca_rdma_cap_get_max_recv_queue_size(info, &mut recv));
            let mut rdma = ptr::null_mut();
            ok(doca_rdma_create(dev, &mut rdma));
            expect(
                doca_rdma_set_send_queue_size(rdma, 9),
                doca_error::DOCA_ERROR_INVALID_VALUE,
            );
            ok(doca_rdma_set_send_queue_size(rdma, 8));
            ok(doca_rdma_destroy(rdma));
            ok(doca_dev_close(dev));
        }
        assert_eq!((send, recv), (8, 16));
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// doca_rdma_set_send_queue_size bounds the sends outstanding on a connection (rounded
    /// up to a power of 2); one more is refused and the caller keeps the task.
    #[test]
    fn send_queue_bounds_outstanding_sends() {
        let _g = serial();
        let opts = Opts {
            send_queue: Some(3), // rounded up to 4
            ..Opts::default()
        };
        let (mut a, mut b) = pair(&opts, &Opts::default()); // no receive posted: sends wait
        for i in 0..4 {
            a.send(ptr::null_mut(), i);
        }
        let extra = a.alloc_send(ptr::null_mut(), 4);
        expect(a.try_submit(as_task_s(extra)), doca_error::DOCA_ERROR_FULL);
        // Receives drain the queue; then the send goes out.
        for i in 0..5 {
            b.post_recv(ptr::null_mut(), i);
        }
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
            .len()
            == 4));
        a.submit(as_task_s(extra));
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
            .len()
            == 5));
        assert!(sends(&a).iter().all(|(_, s)| *s == SUCCESS));
        // SAFETY: rdma live (IDLE only): zero and huge sizes are refused.
        a.teardown();
        b.teardown();
        let c = Endpoint::new(&Opts::default());
        // SAFETY: rdma live and idle.
        unsafe {
            expect(
                doca_rdma_set_send_queue_size(c.rdma, 0),
                doca_error::DOCA_ERROR_INVALID_VALUE,
            );
        }
        c.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// doca_pe.h: in the default selective event mode a raised notification must be cleared
    /// before the engine delivers more; in PROGRESS_ALL mode arming clears it and progress
    /// always runs. Clearing with nothing raised is counted as misuse in the report.
    #[test]
    fn event_modes() {
        let _g = serial();
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
        let mut fd = -1;
        // SAFETY: pe live, out pointer valid.
        ok(unsafe { doca_pe_get_notification_handle(b.pe, &mut fd) });
        // The count is process-wide: compare before and after.
        let spurious = || -> u64 {
            let r = sim::report();
            let at = r.find("\"spurious_clears\":").expect("a count") + 18;
            r[at..]
                .trim_end_matches('}')
                .parse()
                .unwrap_or_else(|_| panic!("{r}"))
        };
        let before = spurious();
        b.post_recv(ptr::null_mut(), 1);
        // SAFETY: pe live.
        ok(unsafe { doca_pe_request_notification(b.pe) });
        a.send(ptr::null_mut(), 1);
        assert!(readable(fd, 5000));
        assert_eq!(spurious(), before);
        // Selective: raised and not cleared, progress delivers nothing.
        std::thread::sleep(Duration::from_millis(20));
        assert!(!b.progress());
        assert!(recvs(&b).is_empty());
        // SAFETY: pe live.
        ok(unsafe { doca_pe_clear_notification(b.pe, fd) });
        assert!(b.progress());
        assert_eq!(recvs(&b).len(), 1);
        // A clear with nothing raised is misuse.
        // SAFETY: pe live.
        ok(unsafe { doca_pe_clear_notification(b.pe, fd) });
        assert_eq!(spurious(), before + 1, "{}", sim::report());

        // PROGRESS_ALL: no clear needed; arming again clears the handle.
        // SAFETY: pe live.
        unsafe {
            ok(doca_pe_set_event_mode(
                b.pe,
                doca_pe_event_mode::DOCA_PE_EVENT_MODE_PROGRESS_ALL,
            ));
            expect(
                doca_pe_set_event_mode(b.pe, doca_pe_event_mode(7)),
                doca_error::DOCA_ERROR_INVALID_VALUE,
            );
            ok(doca_pe_request_notification(b.pe));
        }
        b.post_recv(ptr::null_mut(), 2);
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 1));
        a.send(ptr::null_mut(), 2);
        assert!(readable(fd, 5000));
        assert!(progress_until(&mut [&mut b], T, |e| recvs(e[0]).len() == 2));
        // SAFETY: pe live.
        ok(unsafe { doca_pe_request_notification(b.pe) });
        assert!(
            !readable(fd, 0),
            "arming in PROGRESS_ALL mode clears the handle"
        );
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// DOCA_SIM_MAX_MSG_SIZE (or sim::set_max_msg_size) is what the capability query reports,
    /// and a bigger send fails.
    #[test]
    fn max_message_size_capability() {
        let _g = serial();
        sim::set_max_msg_size(100);
        let dev = open_device(None);
        let mut max = 0u32;
        // SAFETY: dev open; out pointer valid.
        unsafe {
            let info = doca_dev_as_devinfo(dev);
            ok(doca_rdma_cap_get_max_message_size(info, &mut max));
            ok(doca_rdma_cap_task_send_is_supported(info));
            ok(doca_rdma_cap_task_receive_is_supported(info));
            ok(doca_dev_close(dev));
        }
        assert_eq!(max, 100);
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
        let rb = b.buf(0, 4096, 0);
        b.post_recv(rb, 1);
        let sb = a.buf(0, 4096, 0);
        a.fill(sb, &[7u8; 101]);
        a.send(sb, 1);
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 1));
        assert_eq!(sends(&a), vec![(1, IO_FAILED)]);
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    impl Endpoint {
        /// Allocation must fail once the context is stopping.
        fn alloc_recv_after_stop(&mut self) -> Option<*mut doca_rdma_task_receive> {
            let mut t = ptr::null_mut();
            // SAFETY: rdma live, out pointer valid.
            let rc = unsafe {
                doca_rdma_task_receive_allocate_init(
                    self.rdma,
                    ptr::null_mut(),
                    data_u64(0),
                    &mut t,
                )
            };
            expect(rc, BAD_STATE);
            None
        }
    }

    #[test]
    fn destroy_order_is_enforced() {
        let _g = serial();
        let dev = open_device(None);
        let mut mem = vec![0u8; 4096];
        let mut mmap = ptr::null_mut();
        let mut inv = ptr::null_mut();
        let mut buf = ptr::null_mut();
        let mut rdma = ptr::null_mut();
        let base = mem.as_mut_ptr().cast::<c_void>();
        // SAFETY: the memory outlives the mmap; objects are used while live.
        unsafe {
            ok(doca_mmap_create(&mut mmap));
            expect(doca_mmap_start(mmap), doca_error::DOCA_ERROR_INVALID_VALUE); // no range
            ok(doca_mmap_set_memrange(mmap, base, mem.len()));
            expect(
                doca_mmap_set_memrange(mmap, base, 16),
                doca_error::DOCA_ERROR_NOT_PERMITTED,
            );
            ok(doca_mmap_set_permissions(
                mmap,
                doca_access_flag::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE.0,
            ));
            ok(doca_mmap_add_dev(mmap, dev));
            expect(
                doca_mmap_add_dev(mmap, dev),
                doca_error::DOCA_ERROR_ALREADY_EXIST,
            );
            ok(doca_buf_inventory_create(4, &mut inv));
            // Not started yet: no bufs.
            expect(
                doca_buf_inventory_buf_get_by_args(inv, mmap, base, 64, base, 0, &mut buf),
                BAD_STATE,
            );
            ok(doca_buf_inventory_start(inv));
            expect(
                doca_buf_inventory_buf_get_by_args(inv, mmap, base, 64, base, 0, &mut buf),
                BAD_STATE,
            );
            ok(doca_mmap_start(mmap));
            expect(doca_mmap_set_memrange(mmap, base, 16), BAD_STATE);
            expect(doca_mmap_set_permissions(mmap, 0), BAD_STATE);
            expect(
                doca_mmap_add_dev(mmap, dev),
                doca_error::DOCA_ERROR_NOT_PERMITTED,
            );
            // Outside the registered range.
            let past = base.cast::<u8>().add(4000).cast();
            expect(
                doca_buf_inventory_buf_get_by_args(inv, mmap, past, 200, past, 0, &mut buf),
                doca_error::DOCA_ERROR_INVALID_VALUE,
            );
            ok(doca_buf_inventory_buf_get_by_args(
                inv, mmap, base, 64, base, 0, &mut buf,
            ));
            ok(doca_rdma_create(dev, &mut rdma));

            // A buf points into the mmap; the mmap and the inventory are in use.
            expect(doca_mmap_stop(mmap), doca_error::DOCA_ERROR_NOT_PERMITTED);
            expect(
                doca_mmap_destroy(mmap),
                doca_error::DOCA_ERROR_NOT_PERMITTED,
            );
            expect(
                doca_buf_inventory_destroy(inv),
                doca_error::DOCA_ERROR_IN_USE,
            );
            // The device is used by the mmap and the RDMA context.
            expect(doca_dev_close(dev), doca_error::DOCA_ERROR_IN_USE);
            ok(doca_rdma_destroy(rdma));
            expect(doca_dev_close(dev), doca_error::DOCA_ERROR_IN_USE);

            let mut before = 0u16;
            ok(doca_buf_dec_refcount(buf, &mut before));
            assert_eq!(before, 1);
            expect(doca_buf_dec_refcount(buf, ptr::null_mut()), BAD_STATE);
            ok(doca_buf_inventory_destroy(inv)); // destroy stops implicitly
            ok(doca_mmap_destroy(mmap)); // destroy stops implicitly
            ok(doca_dev_close(dev));
        }
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    #[test]
    fn task_and_buf_pools_are_capped() {
        let _g = serial();
        let opts = Opts {
            send_tasks: 2,
            recv_tasks: 3,
            bufs: 2,
            ..Opts::default()
        };
        let (mut ep, peer) = pair(&opts, &Opts::default());
        let r: Vec<_> = (0..3).map(|i| ep.alloc_recv(ptr::null_mut(), i)).collect();
        let mut extra = ptr::null_mut();
        // SAFETY: rdma live, out pointer valid.
        expect(
            unsafe {
                doca_rdma_task_receive_allocate_init(
                    ep.rdma,
                    ptr::null_mut(),
                    data_u64(9),
                    &mut extra,
                )
            },
            doca_error::DOCA_ERROR_NO_MEMORY,
        );
        ep.free_task(as_task_r(r[1]));
        let _again = ep.alloc_recv(ptr::null_mut(), 10);

        let _s: Vec<_> = (0..2).map(|i| ep.alloc_send(ptr::null_mut(), i)).collect();
        let mut extra_s = ptr::null_mut();
        // SAFETY: rdma and conn live, out pointer valid.
        expect(
            unsafe {
                doca_rdma_task_send_allocate_init(
                    ep.rdma,
                    ep.conn,
                    ptr::null(),
                    data_u64(9),
                    &mut extra_s,
                )
            },
            doca_error::DOCA_ERROR_NO_MEMORY,
        );

        // Inventory of 2 bufs.
        let b1 = ep.buf(0, 64, 0);
        let b2 = ep.buf(64, 64, 0);
        let mut b3 = ptr::null_mut();
        // SAFETY: inventory and mmap live; range inside the mmap.
        expect(
            unsafe {
                let p = ep.mem.as_mut_ptr().add(128).cast();
                doca_buf_inventory_buf_get_by_args(ep.inv, ep.mmap, p, 64, p, 0, &mut b3)
            },
            doca_error::DOCA_ERROR_NO_MEMORY,
        );
        let mut free = 0u32;
        // SAFETY: inventory live.
        ok(unsafe { doca_buf_inventory_get_num_free_elements(ep.inv, &mut free) });
        assert_eq!(free, 0);
        // Refcounts: inc reports the count before, the buf returns at zero.
        let mut before = 0u16;
        // SAFETY: b1 live.
        ok(unsafe { doca_buf_inc_refcount(b1, &mut before) });
        assert_eq!(before, 1);
        // SAFETY: b1 live with refcount 2.
        ok(unsafe { doca_buf_dec_refcount(b1, &mut before) });
        assert_eq!(before, 2);
        ep.put_buf(b1);
        let _b4 = ep.buf(128, 64, 0);
        let _ = b2;
        ep.teardown();
        peer.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    #[test]
    fn unconfigured_task_type_cannot_be_allocated() {
        let _g = serial();
        sim::set_start_async(false);
        let dev = open_device(None);
        let mut rdma = ptr::null_mut();
        let mut pe = ptr::null_mut();
        // SAFETY: objects are created, used and destroyed in order.
        unsafe {
            ok(doca_rdma_create(dev, &mut rdma));
            ok(doca_rdma_set_grh_enabled(rdma, 1));
            ok(doca_pe_create(&mut pe));
            let ctx = doca_rdma_as_ctx(rdma);
            ok(doca_pe_connect_ctx(pe, ctx));
            ok(doca_ctx_start(ctx));
            self_connect(rdma);
            let mut t = ptr::null_mut();
            expect(
                doca_rdma_task_receive_allocate_init(rdma, ptr::null_mut(), data_u64(0), &mut t),
                doca_error::DOCA_ERROR_NO_MEMORY,
            );
            ok(doca_ctx_stop(ctx));
            ok(doca_rdma_destroy(rdma));
            ok(doca_pe_destroy(pe));
            ok(doca_dev_close(dev));
        }
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    // ------------------------------------------------------------------ data path

    #[test]
    fn messages_arrive_in_order_and_callbacks_run_only_in_progress() {
        let _g = serial();
        let opts = Opts::default();
        let (mut a, mut b) = pair(&opts, &opts);
        const SLOTS: usize = 8;
        const SLOT: usize = 512;
        const N: u64 = 300;
        // Receiver: 8 slots posted up front, re-posted after each message.
        let rbufs: Vec<_> = (0..SLOTS).map(|i| b.buf(i * SLOT, SLOT, 0)).collect();
        let rtasks: Vec<_> = (0..SLOTS)
            .map(|i| b.post_recv(rbufs[i], i as u64))
            .collect();
        // Sender: 8 staging slots, tasks reused.
        let sbufs: Vec<_> = (0..SLOTS).map(|i| a.buf(i * SLOT, SLOT, 0)).collect();
        let stasks: Vec<_> = (0..SLOTS)
            .map(|i| a.alloc_send(sbufs[i], i as u64))
            .collect();

        let payload = |i: u64| -> Vec<u8> {
            let len = (i as usize * 37) % SLOT;
            (0..len).map(|k| (i as usize + k) as u8).collect()
        };
        let mut sent = 0u64;
        let mut send_done = 0usize;
        let mut got = Vec::new();
        let mut seen_recv = 0usize;
        let start = Instant::now();
        // Window: the sender never has more than SLOTS messages outstanding.
        while got.len() < N as usize {
            assert!(start.elapsed() < T, "stalled at {} messages", got.len());
            while sent < N && sent - (send_done as u64) < SLOTS as u64 {
                let slot = (sent % SLOTS as u64) as usize;
                a.fill(sbufs[slot], &payload(sent));
                a.submit(as_task_s(stasks[slot]));
                sent += 1;
            }
            let made_a = a.progress();
            let made_b = b.progress();
            send_done = sends(&a).len();
            let rs = b.completions();
            for e in &rs[seen_recv..] {
                if let Ev::Recv {
                    user, status, len, ..
                } = e
                {
                    ok(*status);
                    let slot = *user as usize;
                    let data = b.data(rbufs[slot]);
                    assert_eq!(data.len(), len.unwrap() as usize);
                    got.push(data);
                    // Re-post: reset the data length, resubmit the same task.
                    // SAFETY: the buf is live and the task is back in our hands.
                    ok(unsafe { doca_buf_reset_data_len(rbufs[slot]) });
                    b.submit(as_task_r(rtasks[slot]));
                }
            }
            seen_recv = rs.len();
            if !made_a && !made_b {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        for (i, data) in got.iter().enumerate() {
            assert_eq!(data, &payload(i as u64), "message {i}");
        }
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == N as usize));
        assert!(sends(&a).iter().all(|(_, s)| *s == SUCCESS));
        assert_eq!(a.outside_progress(), 0);
        assert_eq!(b.outside_progress(), 0);

        // Nothing is reported without progress, and one call reports one completion.
        a.clear_log();
        b.clear_log();
        for i in 0..3 {
            let slot = i as usize;
            a.fill(sbufs[slot], b"x");
            a.submit(as_task_s(stasks[slot]));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            a.log().is_empty() && b.log().is_empty(),
            "callbacks ran without progress"
        );
        // The sends complete without the receiver progressing: the data landed in its
        // memory and was acknowledged by its "NIC", not by its CPU.
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 3));
        assert!(b.log().is_empty());
        // One doca_pe_progress call reports one completion.
        assert!(b.progress());
        assert_eq!(b.completions().len(), 1);
        assert!(b.progress());
        assert!(b.progress());
        assert!(!b.progress());
        assert_eq!(b.completions().len(), 3);
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    #[test]
    fn notification_handle_becomes_readable_only_when_armed_and_work_is_pending() {
        let _g = serial();
        let opts = Opts::default();
        let (mut a, mut b) = pair(&opts, &opts);
        let mut fd = -1;
        // SAFETY: pe live, out pointer valid.
        ok(unsafe { doca_pe_get_notification_handle(b.pe, &mut fd) });
        assert!(fd >= 0);
        assert!(!readable(fd, 0));

        let rb = b.buf(0, 256, 0);
        b.post_recv(rb, 1);
        let sb = a.buf(0, 256, 0);
        a.fill(sb, b"hello");
        a.send(sb, 1);
        // Not armed: a completion alone does not wake the handle.
        assert!(!readable(fd, 200));
        // Arming with work pending fires at once.
        // SAFETY: pe live.
        ok(unsafe { doca_pe_request_notification(b.pe) });
        assert!(readable(fd, 1000));
        // SAFETY: pe live; the handle argument is unused on Linux.
        ok(unsafe { doca_pe_clear_notification(b.pe, fd) });
        assert!(!readable(fd, 0));
        while b.progress() {}
        assert_eq!(recvs(&b), vec![(1, SUCCESS, Some(5))]);

        // Armed with nothing pending: quiet until the peer sends.
        b.post_recv(ptr::null_mut(), 2);
        // SAFETY: pe live.
        ok(unsafe { doca_pe_request_notification(b.pe) });
        assert!(!readable(fd, 100));
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 1));
        let z = a.alloc_send(ptr::null_mut(), 2);
        a.submit(as_task_s(z));
        assert!(
            readable(fd, 5000),
            "the handle did not wake for an arriving message"
        );
        // SAFETY: pe live.
        ok(unsafe { doca_pe_clear_notification(b.pe, 0) });
        while b.progress() {}
        assert_eq!(recvs(&b).len(), 2);
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    #[test]
    fn send_without_a_posted_receive_fails_after_the_rnr_retries() {
        let _g = serial();
        sim::set_rnr_delay_ms(5);
        let (mut a, mut b) = pair(
            &Opts {
                rnr_retry: 2,
                ..Opts::default()
            },
            &Opts::default(),
        );
        let start = Instant::now();
        let s = a.send(ptr::null_mut(), 1);
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| !sends(e[0]).is_empty()));
        assert_eq!(sends(&a), vec![(1, IO_FAILED)]);
        // Two retries, 5 ms apart, before giving up.
        assert!(
            start.elapsed() >= Duration::from_millis(10),
            "{:?}",
            start.elapsed()
        );
        assert!(recvs(&b).is_empty());
        // The QP is in error: the next send fails too.
        a.submit(as_task_s(s));
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 2));
        assert_eq!(sends(&a)[1], (1, IO_FAILED));
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    #[test]
    fn receive_posted_within_the_rnr_budget_gets_the_messages_in_order() {
        let _g = serial();
        sim::set_rnr_delay_ms(5);
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default()); // rnr_retry 7: forever
        let sbufs: Vec<_> = (0..4).map(|i| a.buf(i * 16, 16, 0)).collect();
        for (i, sb) in sbufs.iter().enumerate() {
            a.fill(*sb, format!("msg{i}").as_bytes());
            a.send(*sb, i as u64);
        }
        std::thread::sleep(Duration::from_millis(40));
        assert!(!a.progress());
        let rbufs: Vec<_> = (0..4).map(|i| b.buf(i * 16, 16, 0)).collect();
        for (i, rb) in rbufs.iter().enumerate() {
            b.post_recv(*rb, i as u64);
        }
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
            .len()
            == 4
            && recvs(e[1]).len() == 4));
        assert!(sends(&a).iter().all(|(_, s)| *s == SUCCESS));
        for (i, rb) in rbufs.iter().enumerate() {
            assert_eq!(b.data(*rb), format!("msg{i}").as_bytes());
        }
        a.teardown();
        b.teardown();
    }

    #[test]
    fn oversize_message_fails_on_both_sides() {
        let _g = serial();
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
        let rb = b.buf(0, 16, 0);
        b.post_recv(rb, 1);
        b.post_recv(ptr::null_mut(), 2);
        let sb = a.buf(0, 64, 0);
        a.fill(sb, &[7u8; 32]);
        a.send(sb, 1);
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
            .len()
            == 1
            && recvs(e[1]).len() == 2));
        assert_eq!(sends(&a), vec![(1, IO_FAILED)]);
        let r = recvs(&b);
        assert_eq!(r[0], (1, doca_error::DOCA_ERROR_TOO_BIG, None));
        // The QP went to error: the other posted receive is flushed.
        assert_eq!(r[1], (2, IO_FAILED, None));
        a.teardown();
        b.teardown();
    }

    #[test]
    fn receive_into_memory_without_local_write_fails() {
        let _g = serial();
        let ro = Opts {
            mmap_permissions: doca_access_flag::DOCA_ACCESS_FLAG_LOCAL_READ_ONLY.0,
            ..Opts::default()
        };
        let (mut a, mut b) = pair(&Opts::default(), &ro);
        let rb = b.buf(0, 16, 0);
        b.post_recv(rb, 1);
        let sb = a.buf(0, 16, 0);
        a.fill(sb, b"abc");
        a.send(sb, 1);
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
            .len()
            == 1
            && recvs(e[1]).len() == 1));
        assert_eq!(sends(&a), vec![(1, IO_FAILED)]);
        assert_eq!(recvs(&b), vec![(1, IO_FAILED, None)]);
        a.teardown();
        b.teardown();
    }

    #[test]
    fn zero_length_messages() {
        let _g = serial();
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
        b.post_recv(ptr::null_mut(), 1);
        let rb = b.buf(0, 32, 3);
        b.post_recv(rb, 2);
        a.send(ptr::null_mut(), 1);
        let empty = a.buf(0, 16, 0); // a buf with an empty data window
        a.send(empty, 2);
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
            .len()
            == 2
            && recvs(e[1]).len() == 2));
        assert_eq!(sends(&a), vec![(1, SUCCESS), (2, SUCCESS)]);
        assert_eq!(
            recvs(&b),
            vec![(1, SUCCESS, Some(0)), (2, SUCCESS, Some(0))]
        );
        let mut len = 0usize;
        // SAFETY: rb live.
        ok(unsafe { doca_buf_get_data_len(rb, &mut len) });
        assert_eq!(len, 3, "an empty message leaves the data length alone");
        a.teardown();
        b.teardown();
    }

    #[test]
    fn receive_appends_after_the_existing_data() {
        let _g = serial();
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
        let rb = b.buf(0, 64, 0);
        b.fill(rb, b"hello");
        b.post_recv(rb, 1);
        let sb = a.buf(0, 64, 0);
        a.fill(sb, b" world");
        a.send(sb, 1);
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| recvs(e[1])
            .len()
            == 1));
        assert_eq!(recvs(&b), vec![(1, SUCCESS, Some(6))]);
        assert_eq!(b.data(rb), b"hello world");
        // A message bigger than the room left after the existing data does not fit.
        let rb2 = b.buf(64, 8, 0);
        b.fill(rb2, b"12345");
        b.post_recv(rb2, 2);
        a.fill(sb, b"6789");
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 1));
        let t = a.alloc_send(sb, 2);
        a.submit(as_task_s(t));
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| recvs(e[1])
            .len()
            == 2));
        assert_eq!(recvs(&b)[1], (2, doca_error::DOCA_ERROR_TOO_BIG, None));
        a.teardown();
        b.teardown();
    }

    #[test]
    fn send_before_connect_is_refused() {
        let _g = serial();
        let mut a = Endpoint::running(&Opts::default());
        let _ = a.export();
        let mut t = ptr::null_mut();
        // SAFETY: rdma and conn live, out pointer valid. Not connected: no send task.
        expect(
            unsafe {
                doca_rdma_task_send_allocate_init(a.rdma, a.conn, ptr::null(), data_u64(1), &mut t)
            },
            BAD_STATE,
        );
        // Only one connection allowed (max_num_connections = 1).
        let mut blob: *const c_void = ptr::null();
        let mut len = 0;
        let mut conn = ptr::null_mut();
        // SAFETY: rdma live, out pointers valid.
        expect(
            unsafe { doca_rdma_export(a.rdma, &mut blob, &mut len, &mut conn) },
            doca_error::DOCA_ERROR_FULL,
        );
        a.teardown();
    }

    #[test]
    fn connect_rejects_corrupted_blobs_and_missing_grh() {
        let _g = serial();
        let mut a = Endpoint::running(&Opts::default());
        let mut b = Endpoint::running(&Opts::default());
        let ba = a.export();
        let _ = b.export();
        expect(
            b.try_connect(&ba[..10]),
            doca_error::DOCA_ERROR_CONNECTION_ABORTED,
        );
        expect(
            b.try_connect(&vec![0xa5u8; ba.len()]),
            doca_error::DOCA_ERROR_CONNECTION_ABORTED,
        );
        a.teardown();
        b.teardown();

        // RoCE (Ethernet) devices need GRH.
        let mut c = Endpoint::running(&Opts {
            grh: false,
            ..Opts::default()
        });
        let mut d = Endpoint::running(&Opts::default());
        let bd = d.export();
        let _ = c.export();
        expect(
            c.try_connect(&bd),
            doca_error::DOCA_ERROR_CONNECTION_ABORTED,
        );
        c.teardown();
        d.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    #[test]
    fn stop_flushes_in_flight_sends_through_the_error_callback() {
        let _g = serial();
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default()); // no receive posted
        a.send(ptr::null_mut(), 1);
        a.send(ptr::null_mut(), 2);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!a.progress());
        // SAFETY: ctx live.
        expect(
            unsafe { doca_ctx_stop(a.ctx) },
            doca_error::DOCA_ERROR_IN_PROGRESS,
        );
        assert!(a.progress());
        assert!(a.progress());
        assert_eq!(sends(&a), vec![(1, IO_FAILED), (2, IO_FAILED)]);
        // The peer's posted receive is not told that the peer went away (RC gives the
        // receiver nothing); its own stop flushes it. (A retransmission that was already in
        // flight may still land in it, as on a real link: that is a success, not an error.)
        std::thread::sleep(Duration::from_millis(50));
        b.post_recv(ptr::null_mut(), 9);
        std::thread::sleep(Duration::from_millis(50));
        while b.progress() {}
        assert!(
            recvs(&b).iter().all(|(_, s, _)| *s == SUCCESS),
            "{:?}",
            recvs(&b)
        );
        a.teardown();
        b.teardown();
    }

    // ------------------------------------------------------------------ faults

    #[test]
    fn fault_injection_fails_the_nth_call() {
        let _g = serial();
        sim::set_faults(
            "doca_rdma_connect:1:DOCA_ERROR_CONNECTION_ABORTED,doca_mmap_start:3:NOT_PERMITTED",
        )
        .unwrap();
        let mut a = Endpoint::running(&Opts::default()); // doca_mmap_start call 1
        let mut b = Endpoint::running(&Opts::default()); // doca_mmap_start call 2
        let ba = a.export();
        let bb = b.export();
        expect(
            a.try_connect(&bb),
            doca_error::DOCA_ERROR_CONNECTION_ABORTED,
        );
        a.connect(&bb); // the second call works
        b.connect(&ba);
        a.wait_running();
        b.wait_running();
        let mut mem = [0u8; 64];
        let mut mmap = ptr::null_mut();
        // SAFETY: the memory outlives the mmap, destroyed below.
        unsafe {
            ok(doca_mmap_create(&mut mmap));
            ok(doca_mmap_set_memrange(
                mmap,
                mem.as_mut_ptr().cast(),
                mem.len(),
            ));
            expect(doca_mmap_start(mmap), doca_error::DOCA_ERROR_NOT_PERMITTED); // call 3
            ok(doca_mmap_start(mmap)); // call 4
            ok(doca_mmap_destroy(mmap));
        }
        a.teardown();
        b.teardown();
        assert!(sim::set_faults("nonsense").is_err());
        assert!(sim::set_faults("doca_pe_create:0:IO_FAILED").is_err());
        sim::set_faults("doca_pe_create:2+:7").unwrap();
        let mut pes = Vec::new();
        for i in 0..4 {
            let mut pe = ptr::null_mut();
            // SAFETY: out pointer valid.
            let rc = unsafe { doca_pe_create(&mut pe) };
            if i == 0 {
                ok(rc);
                pes.push(pe);
            } else {
                expect(rc, doca_error::DOCA_ERROR_NO_MEMORY);
            }
        }
        for pe in pes {
            // SAFETY: pe live.
            ok(unsafe { doca_pe_destroy(pe) });
        }
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    #[test]
    fn fault_injection_on_task_completion_breaks_the_connection() {
        let _g = serial();
        sim::set_faults("doca_rdma_task_send_completion:3:DOCA_ERROR_IO_FAILED").unwrap();
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
        for i in 0..6 {
            b.post_recv(ptr::null_mut(), i);
        }
        for i in 0..6 {
            a.send(ptr::null_mut(), i);
            assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
                .len()
                == i as usize + 1));
        }
        let s: Vec<_> = sends(&a).into_iter().map(|(_, st)| st).collect();
        assert_eq!(
            s,
            vec![SUCCESS, SUCCESS, IO_FAILED, IO_FAILED, IO_FAILED, IO_FAILED]
        );
        a.teardown();
        b.teardown();
    }

    #[test]
    fn fault_injection_from_the_environment() {
        if is_child() {
            let mut pe = ptr::null_mut();
            // SAFETY: out pointer valid.
            expect(
                unsafe { doca_pe_create(&mut pe) },
                doca_error::DOCA_ERROR_NO_MEMORY,
            );
            // SAFETY: out pointer valid.
            ok(unsafe { doca_pe_create(&mut pe) });
            // SAFETY: pe live.
            ok(unsafe { doca_pe_destroy(pe) });
            return;
        }
        let out = run_child(
            "sim_tests::fault_injection_from_the_environment",
            &[("DOCA_SIM_FAIL", "doca_pe_create:1:DOCA_ERROR_NO_MEMORY")],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains("injecting DOCA_ERROR_NO_MEMORY into call 1 of doca_pe_create"),
            "{err}"
        );
    }

    #[test]
    fn drop_after_n_messages_fails_both_sides() {
        let _g = serial();
        sim::set_drop_after(Some(3));
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
        for i in 0..8 {
            b.post_recv(ptr::null_mut(), i);
        }
        for i in 0..8 {
            a.send(ptr::null_mut(), i);
        }
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
            .len()
            == 8
            && recvs(e[1]).len() == 8));
        let reset = doca_error::DOCA_ERROR_CONNECTION_RESET;
        let sa: Vec<_> = sends(&a).into_iter().map(|(_, s)| s).collect();
        let rb: Vec<_> = recvs(&b).into_iter().map(|(_, s, _)| s).collect();
        assert_eq!(sa.iter().filter(|s| **s == SUCCESS).count(), 3, "{sa:?}");
        assert_eq!(rb.iter().filter(|s| **s == SUCCESS).count(), 3, "{rb:?}");
        assert!(sa[3..].iter().all(|s| *s == reset), "{sa:?}");
        assert!(rb[3..].iter().all(|s| *s == reset), "{rb:?}");
        // Later tasks fail the same way.
        let t = a.alloc_send(ptr::null_mut(), 99);
        a.submit(as_task_s(t));
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 9));
        assert_eq!(sends(&a)[8], (99, reset));
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    #[test]
    fn link_flap_kills_the_connection_only_a_sender_notices_and_a_restart_reconnects() {
        let _g = serial();
        let (mut a, mut b) = pair(&Opts::default(), &Opts::default());
        for i in 0..4 {
            b.post_recv(ptr::null_mut(), i);
        }
        a.send(ptr::null_mut(), 0);
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
            .len()
            == 1
            && recvs(e[1]).len() == 1));
        assert_eq!(sim::flap_links(), 2, "both ends' connections");
        assert_eq!(sim::flap_links(), 0, "a flapped connection stays dead");
        // The sender's next send fails (retries exhausted); the receiver notices nothing.
        a.send(ptr::null_mut(), 1);
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 2));
        assert_eq!(sends(&a)[1], (1, IO_FAILED));
        std::thread::sleep(Duration::from_millis(50));
        progress_until(&mut [&mut b], Duration::from_millis(50), |_| false);
        assert_eq!(recvs(&b).len(), 1, "posted receives stay posted");
        // Stopping flushes what the dead connection held; after a start, a new export and
        // connect carry messages again.
        for ep in [&mut a, &mut b] {
            stop_to_idle(ep);
            ep.start();
        }
        let (ba, bb) = (a.export(), b.export());
        a.connect(&bb);
        b.connect(&ba);
        a.wait_running();
        b.wait_running();
        let flushed = recvs(&b);
        assert_eq!(flushed.len(), 4, "{flushed:?}");
        assert!(flushed[1..].iter().all(|r| r.1 == IO_FAILED), "{flushed:?}");
        b.post_recv(ptr::null_mut(), 10);
        a.send(ptr::null_mut(), 11);
        assert!(progress_until(&mut [&mut a, &mut b], T, |e| sends(e[0])
            .len()
            == 3
            && recvs(e[1]).len() == 5));
        assert_eq!(sends(&a)[2], (11, SUCCESS));
        assert_eq!(recvs(&b)[4].1, SUCCESS);
        a.teardown();
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// doca_ctx_stop, then progress until IDLE freeing the tasks that come back.
    fn stop_to_idle(ep: &mut Endpoint) {
        ep.free_idle_tasks();
        // SAFETY: the context is live.
        let rc = unsafe { doca_ctx_stop(ep.ctx) };
        assert!(
            rc == SUCCESS || rc == doca_error::DOCA_ERROR_IN_PROGRESS,
            "doca_ctx_stop: {}",
            name(rc)
        );
        let deadline = Instant::now() + T;
        while ep.state() != IDLE {
            assert!(Instant::now() < deadline, "context never reached IDLE");
            ep.free_idle_tasks();
            if !ep.progress() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    // ------------------------------------------------------------------ processes

    fn receiver_process(dir: &std::path::Path, n: u64, expect_drop: bool) {
        let mut b = Endpoint::running(&Opts::default());
        let blob = b.export();
        put_file(&dir.join("child.blob"), &blob);
        let peer = wait_file(&dir.join("parent.blob"), T);
        b.connect(&peer);
        b.wait_running();
        const SLOTS: usize = 16;
        let rbufs: Vec<_> = (0..SLOTS).map(|i| b.buf(i * 256, 256, 0)).collect();
        let rtasks: Vec<_> = (0..SLOTS)
            .map(|i| b.post_recv(rbufs[i], i as u64))
            .collect();
        put_file(&dir.join("ready"), b"");
        let mut fd = -1;
        // SAFETY: pe live, out pointer valid.
        ok(unsafe { doca_pe_get_notification_handle(b.pe, &mut fd) });
        let mut got = 0u64;
        let mut failed = 0u64;
        let mut seen = 0usize;
        let start = Instant::now();
        while got + failed < n && start.elapsed() < T {
            // The transport's blocking pattern: arm, wait on the fd, clear, drain.
            // SAFETY: pe live.
            ok(unsafe { doca_pe_request_notification(b.pe) });
            readable(fd, 100);
            // SAFETY: pe live.
            ok(unsafe { doca_pe_clear_notification(b.pe, fd) });
            while b.progress() {}
            let rs = b.completions();
            for e in &rs[seen..] {
                let Ev::Recv { user, status, .. } = e else {
                    continue;
                };
                if *status != SUCCESS {
                    failed += 1;
                    continue;
                }
                let slot = *user as usize;
                let data = b.data(rbufs[slot]);
                assert_eq!(data, format!("message {got}").as_bytes());
                got += 1;
                // SAFETY: buf live; task back in our hands.
                ok(unsafe { doca_buf_reset_data_len(rbufs[slot]) });
                b.submit(as_task_r(rtasks[slot]));
            }
            seen = rs.len();
            if expect_drop && failed > 0 {
                break;
            }
        }
        put_file(&dir.join("result"), format!("{got} {failed}").as_bytes());
        b.teardown();
        assert_eq!(sim::live_objects(), 0, "{}", sim::report());
    }

    /// Parent side: send `n` messages to the child, `window` at a time.
    fn sender(dir: &std::path::Path, n: u64) -> Endpoint {
        let mut a = Endpoint::running(&Opts::default());
        let blob = a.export();
        put_file(&dir.join("parent.blob"), &blob);
        let peer = wait_file(&dir.join("child.blob"), T);
        a.connect(&peer);
        a.wait_running();
        wait_file(&dir.join("ready"), T);
        const W: usize = 16;
        let sbufs: Vec<_> = (0..W).map(|i| a.buf(i * 256, 256, 0)).collect();
        let stasks: Vec<_> = (0..W).map(|i| a.alloc_send(sbufs[i], i as u64)).collect();
        let mut sent = 0u64;
        let start = Instant::now();
        while (sends(&a).len() as u64) < n && start.elapsed() < T {
            let done = sends(&a).len() as u64;
            if sends(&a).iter().any(|(_, s)| *s != SUCCESS) {
                break;
            }
            while sent < n && sent - done < W as u64 {
                let slot = (sent % W as u64) as usize;
                a.fill(sbufs[slot], format!("message {sent}").as_bytes());
                a.submit(as_task_s(stasks[slot]));
                sent += 1;
            }
            if !a.progress() {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        a
    }

    #[test]
    fn two_processes_exchange_messages_in_order() {
        if is_child() {
            let dir = std::path::PathBuf::from(std::env::var("DOCA_SIM_TEST_DIR").unwrap());
            receiver_process(&dir, 1000, false);
            return;
        }
        let _g = serial();
        let dir = temp_dir("xproc");
        let reports = dir.join("reports");
        std::fs::create_dir_all(&reports).unwrap();
        let d = dir.to_string_lossy().into_owned();
        let r = reports.to_string_lossy().into_owned();
        let child = std::thread::spawn(move || {
            run_child(
                "sim_tests::two_processes_exchange_messages_in_order",
                &[("DOCA_SIM_TEST_DIR", &d), ("DOCA_SIM_REPORT_DIR", &r)],
            )
        });
        let a = sender(&dir, 1000);
        let s = sends(&a);
        assert_eq!(s.len(), 1000);
        assert!(s.iter().all(|(_, st)| *st == SUCCESS));
        let out = child.join().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("result")).unwrap(),
            "1000 0"
        );
        a.teardown();
        // The child's exit report says it leaked nothing.
        let report = std::fs::read_dir(&reports)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let text = std::fs::read_to_string(report).unwrap();
        assert!(text.contains("\"live\":0"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn drop_after_n_in_one_process_fails_both_processes() {
        if is_child() {
            let dir = std::path::PathBuf::from(std::env::var("DOCA_SIM_TEST_DIR").unwrap());
            receiver_process(&dir, 50, true);
            return;
        }
        let _g = serial();
        let dir = temp_dir("xdrop");
        let d = dir.to_string_lossy().into_owned();
        let child = std::thread::spawn(move || {
            run_child(
                "sim_tests::drop_after_n_in_one_process_fails_both_processes",
                &[("DOCA_SIM_TEST_DIR", &d), ("DOCA_SIM_DROP_AFTER", "5")],
            )
        });
        let a = sender(&dir, 50);
        let out = child.join().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        eprintln!("child: {err}");
        assert!(err.contains("DOCA_SIM_DROP_AFTER"), "{err}");
        let result = std::fs::read_to_string(dir.join("result")).unwrap();
        let got: Vec<u64> = result.split(' ').map(|x| x.parse().unwrap()).collect();
        assert_eq!(got[0], 5, "{result}");
        assert!(got[1] > 0, "{result}");
        let s = sends(&a);
        assert_eq!(
            s.iter().filter(|(_, st)| *st == SUCCESS).count(),
            5,
            "{s:?}"
        );
        assert!(
            s.iter()
                .any(|(_, st)| *st == doca_error::DOCA_ERROR_CONNECTION_RESET),
            "{s:?}"
        );
        a.teardown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sends_fail_when_the_peer_process_dies() {
        if is_child() {
            let dir = std::path::PathBuf::from(std::env::var("DOCA_SIM_TEST_DIR").unwrap());
            let mut b = Endpoint::running(&Opts::default());
            let blob = b.export();
            put_file(&dir.join("child.blob"), &blob);
            let peer = wait_file(&dir.join("parent.blob"), T);
            b.connect(&peer);
            b.wait_running();
            b.post_recv(ptr::null_mut(), 0);
            put_file(&dir.join("ready"), b"");
            wait_file(&dir.join("die"), T);
            // SAFETY: terminate without any cleanup, like a killed process.
            unsafe { libc::_exit(9) };
        }
        let _g = serial();
        let dir = temp_dir("xkill");
        let d = dir.to_string_lossy().into_owned();
        let child = std::thread::spawn(move || {
            run_child(
                "sim_tests::sends_fail_when_the_peer_process_dies",
                &[("DOCA_SIM_TEST_DIR", &d)],
            )
        });
        let mut a = Endpoint::running(&Opts::default());
        let blob = a.export();
        put_file(&dir.join("parent.blob"), &blob);
        let peer = wait_file(&dir.join("child.blob"), T);
        a.connect(&peer);
        a.wait_running();
        wait_file(&dir.join("ready"), T);
        a.send(ptr::null_mut(), 1);
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 1));
        assert_eq!(sends(&a), vec![(1, SUCCESS)]);
        // A receive posted here is not failed by the peer's death...
        a.post_recv(ptr::null_mut(), 5);
        put_file(&dir.join("die"), b"");
        let out = child.join().unwrap();
        assert_eq!(out.status.code(), Some(9));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!a.progress());
        // ...but a send is: nobody acknowledges it any more.
        a.send(ptr::null_mut(), 2);
        assert!(progress_until(&mut [&mut a], T, |e| sends(e[0]).len() == 2
            && !recvs(e[0]).is_empty()));
        assert_eq!(sends(&a)[1], (2, IO_FAILED));
        // And with the QP in error the receive is flushed too.
        assert_eq!(recvs(&a), vec![(5, IO_FAILED, None)]);
        a.teardown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn leaks_are_reported_at_exit() {
        if is_child() {
            let mut pe = ptr::null_mut();
            // SAFETY: out pointer valid; the PE is deliberately never destroyed.
            ok(unsafe { doca_pe_create(&mut pe) });
            let _dev = open_device(None);
            assert_eq!(sim::live_objects(), 2);
            assert!(sim::report().contains("\"pe\":1"), "{}", sim::report());
            return;
        }
        let _g = serial();
        let dir = temp_dir("leak");
        let d = dir.to_string_lossy().into_owned();
        let out = run_child(
            "sim_tests::leaks_are_reported_at_exit",
            &[("DOCA_SIM_REPORT_DIR", &d)],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains("LEAK: 2 DOCA objects were not destroyed at exit"),
            "{err}"
        );
        let report = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let text = std::fs::read_to_string(report).unwrap();
        assert!(
            text.contains("\"live\":2") && text.contains("\"pe\":1") && text.contains("\"dev\":1"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    // ------------------------------------------------------------------ misuse

    unsafe extern "C" fn progress_from_callback(
        task: *mut doca_rdma_task_receive,
        _tud: doca_data,
        cud: doca_data,
    ) {
        let _ = task;
        // SAFETY: the test stored the PE pointer as the context user data.
        unsafe { doca_pe_progress(cud.ptr.cast()) };
    }

    #[test]
    fn misuse_aborts_with_a_clear_message() {
        if let Ok(which) = std::env::var("DOCA_SIM_TEST_MISUSE") {
            let (mut a, _b) = pair(&Opts::default(), &Opts::default());
            let t = a.alloc_recv(ptr::null_mut(), 0);
            match which.as_str() {
                "double-submit" => {
                    // SAFETY: deliberate misuse; the simulator aborts.
                    unsafe {
                        doca_task_submit(as_task_r(t));
                        doca_task_submit(as_task_r(t));
                    }
                }
                "free-submitted" => {
                    // SAFETY: deliberate misuse; the simulator aborts.
                    unsafe {
                        doca_task_submit(as_task_r(t));
                        doca_task_free(as_task_r(t));
                    }
                }
                _ => unreachable!(),
            }
            return;
        }
        if is_child() {
            return;
        }
        for (which, message) in [
            ("double-submit", "is already submitted"),
            ("free-submitted", "is submitted"),
        ] {
            let out = run_child(
                "sim_tests::misuse_aborts_with_a_clear_message",
                &[("DOCA_SIM_TEST_MISUSE", which)],
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{which}: the child should abort");
            assert!(
                err.contains("FATAL misuse") && err.contains(message),
                "{which}: {err}"
            );
        }
    }

    #[test]
    fn progress_inside_a_callback_aborts() {
        if is_child() {
            let dev = open_device(None);
            let mut rdma = ptr::null_mut();
            let mut pe = ptr::null_mut();
            // SAFETY: deliberate misuse at the end: the receive error callback (flush on
            // stop) calls doca_pe_progress, which the simulator refuses by aborting.
            unsafe {
                ok(doca_rdma_create(dev, &mut rdma));
                ok(doca_pe_create(&mut pe));
                let ctx = doca_rdma_as_ctx(rdma);
                ok(doca_rdma_task_receive_set_conf(
                    rdma,
                    Some(progress_from_callback),
                    Some(progress_from_callback),
                    1,
                ));
                ok(doca_ctx_set_user_data(ctx, data_ptr(pe.cast())));
                ok(doca_pe_connect_ctx(pe, ctx));
                ok(doca_rdma_set_grh_enabled(rdma, 1));
                sim::set_start_async(false);
                ok(doca_ctx_start(ctx));
                self_connect(rdma);
                let mut t = ptr::null_mut();
                ok(doca_rdma_task_receive_allocate_init(
                    rdma,
                    ptr::null_mut(),
                    data_u64(0),
                    &mut t,
                ));
                ok(doca_task_submit(doca_rdma_task_receive_as_task(t)));
                expect(doca_ctx_stop(ctx), doca_error::DOCA_ERROR_IN_PROGRESS);
                doca_pe_progress(pe);
            }
            unreachable!("the simulator should have aborted");
        }
        let out = run_child("sim_tests::progress_inside_a_callback_aborts", &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("doca_pe_progress called from inside a completion or state callback"),
            "{err}"
        );
    }
}
