//! ABI conformance of our declarations (`verbs_sys::ffi`) with rdma-core's real
//! `<infiniband/verbs.h>` (Debian: `libibverbs-dev`).
//!
//! The test writes a C program from our declarations, compiles it against the real headers with
//! `cc -Werror` and runs it:
//! * every function prototype we declare (and every ops-table member we call) is turned into a C
//!   function-pointer type and checked with `__builtin_types_compatible_p` against the real
//!   function (`_Static_assert`: a mismatch is a compile error naming the function);
//! * the program prints `sizeof`/`_Alignof` of every struct we declare, `offsetof`/`sizeof` of
//!   every field, and the value of every constant, and the test compares them with Rust's
//!   `size_of`/`align_of`/`offset_of!` and our constants.
//!
//! A second test proves the check has teeth: deliberately wrong prototypes must not compile, and
//! deliberately wrong layouts and values must be reported.
//!
//! Without a C compiler or the headers both tests print `skipped:` and why, and fail when
//! `RDMA_TEST_STRICT=1` (CI sets it).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of, MaybeUninit};
use std::path::PathBuf;
use std::process::Command;

use verbs_sys::ffi::{self, Prototype};

/// One Rust type and the C type it stands for.
struct Layout {
    rust: &'static str,
    c: &'static str,
    size: usize,
    align: usize,
    /// (C member = Rust field name, offset, size)
    fields: Vec<(&'static str, usize, usize)>,
}

fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

macro_rules! field_size {
    ($t:ty, $f:ident) => {{
        let value = MaybeUninit::<$t>::uninit();
        let p = value.as_ptr();
        // SAFETY: only the field's address is computed (no reference, no read), inside a live
        // allocation of the right type.
        size_of_pointee(unsafe { std::ptr::addr_of!((*p).$f) })
    }};
}

macro_rules! layouts {
    ($( $ty:ident = $c:expr => { $($f:ident),* $(,)? } )*) => {
        vec![ $( Layout {
            rust: stringify!($ty),
            c: $c,
            size: size_of::<ffi::$ty>(),
            align: align_of::<ffi::$ty>(),
            fields: vec![ $( (stringify!($f), offset_of!(ffi::$ty, $f), field_size!(ffi::$ty, $f)) ),* ],
        }, )* ]
    };
}

/// Every struct and union we declare, with every field.
fn layouts() -> Vec<Layout> {
    layouts! {
        _ibv_device_ops = "struct _ibv_device_ops" => { _dummy1, _dummy2 }
        ibv_device = "struct ibv_device" => {
            _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path
        }
        ibv_gid = "union ibv_gid" => { raw, global }
        ibv_gid_global = "__typeof__(((union ibv_gid *)0)->global)" => {
            subnet_prefix, interface_id
        }
        ibv_device_attr = "struct ibv_device_attr" => {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
            vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
            max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
            max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
            max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
            max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
            max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt
        }
        ibv_port_attr = "struct ibv_port_attr" => {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
            qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
            init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
            port_cap_flags2
        }
        ibv_wc = "struct ibv_wc" => {
            wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
            pkey_index, slid, sl, dlid_path_bits
        }
        ibv_pd = "struct ibv_pd" => { context, handle }
        ibv_mr = "struct ibv_mr" => { context, pd, addr, length, handle, lkey, rkey }
        ibv_global_route = "struct ibv_global_route" => {
            dgid, flow_label, sgid_index, hop_limit, traffic_class
        }
        ibv_ah_attr = "struct ibv_ah_attr" => {
            grh, dlid, sl, src_path_bits, static_rate, is_global, port_num
        }
        ibv_qp_cap = "struct ibv_qp_cap" => {
            max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data
        }
        ibv_qp_init_attr = "struct ibv_qp_init_attr" => {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all
        }
        ibv_qp_attr = "struct ibv_qp_attr" => {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
            qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
            en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
            port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit
        }
        ibv_sge = "struct ibv_sge" => { addr, length, lkey }
        ibv_send_wr = "struct ibv_send_wr" => {
            wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type, bind_mw
        }
        ibv_send_wr_wr = "__typeof__(((struct ibv_send_wr *)0)->wr)" => { rdma, atomic, ud }
        ibv_send_wr_rdma = "__typeof__(((struct ibv_send_wr *)0)->wr.rdma)" => {
            remote_addr, rkey
        }
        ibv_send_wr_atomic = "__typeof__(((struct ibv_send_wr *)0)->wr.atomic)" => {
            remote_addr, compare_add, swap, rkey
        }
        ibv_send_wr_ud = "__typeof__(((struct ibv_send_wr *)0)->wr.ud)" => {
            ah, remote_qpn, remote_qkey
        }
        ibv_send_wr_qp_type = "__typeof__(((struct ibv_send_wr *)0)->qp_type.xrc)" => {
            remote_srqn
        }
        ibv_send_wr_bind_mw = "__typeof__(((struct ibv_send_wr *)0)->bind_mw)" => {
            mw, rkey, bind_info
        }
        ibv_send_wr_tso = "__typeof__(((struct ibv_send_wr *)0)->tso)" => { hdr, hdr_sz, mss }
        ibv_mw_bind_info = "struct ibv_mw_bind_info" => { mr, addr, length, mw_access_flags }
        ibv_recv_wr = "struct ibv_recv_wr" => { wr_id, next, sg_list, num_sge }
        ibv_comp_channel = "struct ibv_comp_channel" => { context, fd, refcnt }
        ibv_cq = "struct ibv_cq" => {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed
        }
        ibv_qp = "struct ibv_qp" => {
            context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
            mutex, cond, events_completed
        }
        ibv_context_ops = "struct ibv_context_ops" => {
            _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
            _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
            _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
            _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
            _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
            _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
            _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event
        }
        ibv_context = "struct ibv_context" => {
            device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat
        }
    }
}

/// What Rust says: `kind name` -> value, in the C program's output format.
fn rust_values(layouts: &[Layout]) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for l in layouts {
        m.insert(format!("size {}", l.rust), l.size as i64);
        m.insert(format!("align {}", l.rust), l.align as i64);
        for (f, off, size) in &l.fields {
            m.insert(format!("offset {}.{f}", l.rust), *off as i64);
            m.insert(format!("fsize {}.{f}", l.rust), *size as i64);
        }
    }
    for (name, value) in ffi::CONSTANTS {
        m.insert(format!("const {name}"), *value);
    }
    m
}

/// A Rust type as written in our declarations, in C.
fn c_type(rust: &str) -> String {
    let spaced = rust.replace('*', " * ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    // Pointer layers, outermost first: true = const.
    let mut layers = Vec::new();
    let mut i = 0;
    while i + 1 < tokens.len() && tokens[i] == "*" {
        layers.push(tokens[i + 1] == "const");
        i += 2;
    }
    let base = match tokens[i..].join(" ").as_str() {
        "c_int" | "i32" => "int".to_string(),
        "c_uint" => "unsigned int".to_string(),
        "c_char" => "char".to_string(),
        "c_void" | "()" => "void".to_string(),
        "u8" => "uint8_t".to_string(),
        "u16" => "uint16_t".to_string(),
        "u32" => "uint32_t".to_string(),
        "u64" => "uint64_t".to_string(),
        "usize" => "size_t".to_string(),
        "ibv_gid" => "union ibv_gid".to_string(),
        other if other.starts_with("ibv_") || other.starts_with("_compat_") => {
            format!("struct {other}")
        }
        other => panic!("no C spelling for Rust type `{other}` (in `{rust}`)"),
    };
    let mut out = base;
    for (depth, is_const) in layers.iter().rev().enumerate() {
        if *is_const && depth == 0 {
            out = format!("const {out}");
        } else if *is_const {
            out.push_str(" const");
        }
        out.push_str(" *");
    }
    out
}

fn c_fn_type(p: &Prototype, typedef: &str) -> String {
    let args: Vec<String> = p.args.iter().map(|a| c_type(a)).collect();
    let args = if args.is_empty() {
        "void".to_string()
    } else {
        args.join(", ")
    };
    format!("typedef {} (*{typedef})({args});", c_type(p.ret))
}

/// The C program: prototype assertions, then a `main` printing every layout and constant.
fn c_program(layouts: &[Layout], functions: &[Prototype], ops: &[Prototype]) -> String {
    let mut c = String::from(
        "#include <infiniband/verbs.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n\n",
    );
    for p in functions {
        let t = format!("vs_fn_{}", p.name);
        let _ = writeln!(c, "{}", c_fn_type(p, &t));
        let _ = writeln!(
            c,
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&{0}), {t}), \"prototype of {0} differs from our declaration\");",
            p.name
        );
    }
    for p in ops {
        let t = format!("vs_op_{}", p.name);
        let _ = writeln!(c, "{}", c_fn_type(p, &t));
        let _ = writeln!(
            c,
            "_Static_assert(__builtin_types_compatible_p(__typeof__(((struct ibv_context_ops *)0)->{0}), {t}), \"ops member {0} differs from our declaration\");",
            p.name
        );
    }
    c.push_str("\nint main(void)\n{\n");
    for l in layouts {
        let _ = writeln!(
            c,
            "\tprintf(\"size {0} %zu\\n\", sizeof({1}));\n\tprintf(\"align {0} %zu\\n\", (size_t)_Alignof({1}));",
            l.rust, l.c
        );
        for (f, _, _) in &l.fields {
            let _ = writeln!(
                c,
                "\tprintf(\"offset {0}.{2} %zu\\n\", offsetof({1}, {2}));\n\tprintf(\"fsize {0}.{2} %zu\\n\", sizeof(((({1} *)0)->{2})));",
                l.rust, l.c, f
            );
        }
    }
    for (name, _) in ffi::CONSTANTS {
        let _ = writeln!(
            c,
            "\tprintf(\"const {name} %lld\\n\", (long long)({name}));"
        );
    }
    c.push_str("\treturn 0;\n}\n");
    c
}

fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

fn include_args() -> Vec<String> {
    std::env::var("VERBS_SYS_INCLUDE")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| format!("-I{d}"))
        .collect()
}

/// A fresh directory per call (tests run in parallel threads of one process).
fn work_dir(tag: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "verbs-sys-conformance-{tag}-{}-{n}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create the conformance work directory");
    dir
}

/// Why the check cannot run here (no compiler, no headers), if so.
fn cannot_run() -> Option<String> {
    let dir = work_dir("probe");
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        "#include <infiniband/verbs.h>\nint main(void) { return 0; }\n",
    )
    .expect("write the probe");
    let out = Command::new(compiler())
        .args(include_args())
        .arg("-fsyntax-only")
        .arg(&src)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Err(e) => Some(format!("no C compiler ({}: {e})", compiler())),
        Ok(o) if !o.status.success() => Some(format!(
            "the rdma-core headers are not installed (apt-get install libibverbs-dev; or set \
             VERBS_SYS_INCLUDE): {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("")
        )),
        Ok(_) => None,
    }
}

/// Skips (or, under RDMA_TEST_STRICT=1, fails) when the check cannot run; true = go on.
fn can_run() -> bool {
    match cannot_run() {
        None => true,
        Some(why) => {
            if std::env::var("RDMA_TEST_STRICT").as_deref() == Ok("1") {
                panic!("RDMA_TEST_STRICT=1 but the ABI check cannot run: {why}");
            }
            println!("skipped: {why}");
            false
        }
    }
}

/// Compiles (with -Werror) and runs the program; the C values, or the compiler's stderr.
fn run_c(tag: &str, program: &str) -> Result<BTreeMap<String, i64>, String> {
    let dir = work_dir(tag);
    let src = dir.join("abi.c");
    let bin = dir.join("abi");
    std::fs::write(&src, program).expect("write abi.c");
    let out = Command::new(compiler())
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .args(include_args())
        .arg(&src)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", compiler()))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    // RDMA_TEST_RUNNER: the program is built for the target, which may run under emulation
    // (scripts/build-aarch64.sh sets qemu-aarch64; the kernel cannot exec it itself).
    let run = match std::env::var_os("RDMA_TEST_RUNNER").filter(|r| !r.is_empty()) {
        Some(runner) => Command::new(runner).arg(&bin).output(),
        None => Command::new(&bin).output(),
    }
    .map_err(|e| format!("cannot run the check program: {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !run.status.success() {
        return Err(format!("the check program failed: {:?}", run.status));
    }
    let mut values = BTreeMap::new();
    for line in String::from_utf8_lossy(&run.stdout).lines() {
        let mut parts = line.rsplitn(2, ' ');
        let (Some(v), Some(key)) = (parts.next(), parts.next()) else {
            return Err(format!("unexpected output line `{line}`"));
        };
        let v: i64 = v
            .parse()
            .map_err(|_| format!("unexpected value in `{line}`"))?;
        values.insert(key.to_string(), v);
    }
    Ok(values)
}

/// Structs that rdma-core grows at the end and of which we declare and read a prefix, with the
/// room our callers leave behind them: rdma-core's may be larger than ours by at most that
/// (its fields must still be where ours are). `ibv_port_attr` has `active_speed_ex` after ours in
/// Debian trixie's rdma-core 56 headers (bookworm's 44 do not).
const GROWN_AT_THE_END: &[(&str, usize)] =
    &[("size ibv_port_attr", ffi::PORT_ATTR_ROOM_FOR_NEWER_FIELDS)];

/// Every difference between what Rust declares and what C says.
fn differences(rust: &BTreeMap<String, i64>, c: &BTreeMap<String, i64>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, ours) in rust {
        let room = GROWN_AT_THE_END
            .iter()
            .find(|(k, _)| k == key)
            .map_or(0, |&(_, room)| room as i64);
        match c.get(key) {
            None => out.push(format!("{key}: missing from the C output")),
            Some(theirs) if theirs == ours => {}
            Some(theirs) if room > 0 && theirs > ours && theirs - ours <= room => {}
            Some(theirs) if room > 0 => out.push(format!(
                "{key}: ours {ours}, rdma-core {theirs} (at most {room} bytes more allowed)"
            )),
            Some(theirs) => out.push(format!("{key}: ours {ours}, rdma-core {theirs}")),
        }
    }
    out
}

#[test]
fn declarations_match_the_rdma_core_headers() {
    if !can_run() {
        return;
    }
    let layouts = layouts();
    let program = c_program(&layouts, ffi::PROTOTYPES, ffi::OPS_PROTOTYPES);
    let c = run_c("real", &program).unwrap_or_else(|e| {
        panic!("our declarations differ from <infiniband/verbs.h> (prototypes):\n{e}")
    });
    let rust = rust_values(&layouts);
    let diff = differences(&rust, &c);
    assert!(
        diff.is_empty(),
        "our declarations differ from <infiniband/verbs.h>:\n{}",
        diff.join("\n")
    );
    println!(
        "checked {} prototypes, {} ops members, {} layouts, {} values against the rdma-core headers",
        ffi::PROTOTYPES.len(),
        ffi::OPS_PROTOTYPES.len(),
        layouts.len(),
        rust.len()
    );
}

#[test]
fn the_check_rejects_deliberate_mismatches() {
    if !can_run() {
        return;
    }
    let layouts = layouts();

    // Prototypes: one wrong argument, one wrong return type, one wrong ops member.
    let doctor = |list: &[Prototype], name: &str, edit: &dyn Fn(&mut Prototype)| {
        let mut v = list.to_vec();
        let p = v
            .iter_mut()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no prototype {name}"));
        edit(p);
        v
    };
    let wrong_arg = doctor(ffi::PROTOTYPES, "ibv_query_gid", &|p| {
        p.args = &["*mut ibv_context", "u8", "u32", "*mut ibv_gid"]
    });
    let wrong_ret = doctor(ffi::PROTOTYPES, "ibv_get_device_name", &|p| {
        p.ret = "*mut c_char"
    });
    let wrong_op = doctor(ffi::OPS_PROTOTYPES, "post_send", &|p| {
        p.args = &["*mut ibv_qp", "*mut ibv_send_wr", "*mut ibv_send_wr"]
    });
    for (functions, ops, named) in [
        (
            &wrong_arg[..],
            ffi::OPS_PROTOTYPES,
            "prototype of ibv_query_gid",
        ),
        (
            &wrong_ret[..],
            ffi::OPS_PROTOTYPES,
            "prototype of ibv_get_device_name",
        ),
        (ffi::PROTOTYPES, &wrong_op[..], "ops member post_send"),
    ] {
        match run_c("doctored", &c_program(&layouts, functions, ops)) {
            Ok(_) => panic!("a wrong declaration ({named}) was accepted"),
            Err(e) => assert!(e.contains(named), "rejected, but not for `{named}`:\n{e}"),
        }
    }

    // Layouts and values: the real C output against doctored Rust values.
    let c = run_c(
        "same",
        &c_program(&layouts, ffi::PROTOTYPES, ffi::OPS_PROTOTYPES),
    )
    .expect("the undoctored program compiles");
    let mut rust = rust_values(&layouts);
    for (key, delta) in [
        ("offset ibv_wc.byte_len", 4),
        ("size ibv_qp_attr", 8),
        ("fsize ibv_send_wr.wr", -8),
        ("const IBV_QPS_RTS", 1),
        ("const IBV_SEND_INLINE", 1),
    ] {
        *rust.get_mut(key).unwrap_or_else(|| panic!("no {key}")) += delta;
    }
    rust.insert("offset ibv_wc.no_such_field".into(), 0);
    let diff = differences(&rust, &c);
    for key in [
        "offset ibv_wc.byte_len",
        "size ibv_qp_attr",
        "fsize ibv_send_wr.wr",
        "const IBV_QPS_RTS",
        "const IBV_SEND_INLINE",
        "offset ibv_wc.no_such_field",
    ] {
        assert!(
            diff.iter().any(|d| d.starts_with(&format!("{key}:"))),
            "a wrong {key} was not reported: {diff:?}"
        );
    }
    assert_eq!(diff.len(), 6, "only the doctored values differ: {diff:?}");

    // The type spelling the prototypes rely on.
    assert_eq!(c_type("*mut *mut ibv_device"), "struct ibv_device * *");
    assert_eq!(c_type("*const c_char"), "const char *");
    assert_eq!(c_type("*mut ibv_gid"), "union ibv_gid *");
    assert_eq!(c_type("()"), "void");
}

/// rdma-core's `ibv_port_attr` may be longer than ours only within the room our caller leaves
/// behind it; shorter, or longer than that, is a difference. Other structs must be equal.
#[test]
fn a_struct_grown_at_the_end_passes_only_within_the_room_left_for_it() {
    let key = "size ibv_port_attr".to_string();
    let room = ffi::PORT_ATTR_ROOM_FOR_NEWER_FIELDS as i64;
    let ours = BTreeMap::from([(key.clone(), 52)]);
    let theirs = |n: i64| BTreeMap::from([(key.clone(), n)]);
    assert!(differences(&ours, &theirs(52)).is_empty());
    assert!(differences(&ours, &theirs(56)).is_empty());
    assert!(differences(&ours, &theirs(52 + room)).is_empty());
    assert_eq!(differences(&ours, &theirs(53 + room)).len(), 1);
    assert_eq!(differences(&ours, &theirs(48)).len(), 1);
    let other = BTreeMap::from([("size ibv_qp_attr".to_string(), 144)]);
    let bigger = BTreeMap::from([("size ibv_qp_attr".to_string(), 148)]);
    assert_eq!(differences(&other, &bigger).len(), 1);
}
