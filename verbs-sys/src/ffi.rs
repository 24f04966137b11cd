//! Raw declarations of the libibverbs subset we use, written from the documented rdma-core ABI
//! (the `ibv_*` man pages and the stable user-space ABI of `libibverbs.so.1`).
//!
//! Every struct is `#[repr(C)]` with the field order, types and sizes of the C ABI; every C enum
//! is a type alias of the integer the C compiler uses for it (`unsigned int`, or `int` when it has
//! negative values) plus one constant per value. The ABI conformance test
//! (`tests/conformance.rs`) checks every size, field offset, constant value and function
//! prototype declared here against the real `<infiniband/verbs.h>`.
//!
//! Nothing here is linked: the functions are resolved from `libibverbs.so.1` at run time (see
//! [`crate::Library`]), and the data-path calls that rdma-core defines as inline functions
//! (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`) are reached through the
//! context's [`ibv_context_ops`] table, exactly as those inline functions do.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use libc::{pthread_cond_t, pthread_mutex_t};

/// Declares C enum values (or `#define`d constants) as typed Rust constants and records them
/// in [`CONSTANTS`] for the conformance test.
macro_rules! c_constants {
    ($( $ty:ident { $( $name:ident = $val:expr, )* } )*) => {
        $( $(
            #[doc = concat!("`", stringify!($name), "`, a value of `", stringify!($ty), "`.")]
            pub const $name: $ty = $val;
        )* )*
        /// Every constant declared in this module, by its C name, with its value (for the ABI
        /// conformance test).
        pub const CONSTANTS: &[(&str, i64)] = &[ $( $( (stringify!($name), $name as i64), )* )* ];
    };
}

/// `enum ibv_mtu`.
pub type ibv_mtu = c_uint;
/// `enum ibv_port_state`.
pub type ibv_port_state = c_uint;
/// The link-layer values of `ibv_port_attr::link_layer` (an anonymous C enum stored in a byte).
pub type ibv_link_layer = u8;
/// `enum ibv_qp_state`.
pub type ibv_qp_state = c_uint;
/// `enum ibv_qp_type`.
pub type ibv_qp_type = c_uint;
/// `enum ibv_access_flags` (a bit set, passed as `int`/`unsigned int`).
pub type ibv_access_flags = c_uint;
/// `enum ibv_send_flags` (a bit set stored in `ibv_send_wr::send_flags`).
pub type ibv_send_flags = c_uint;
/// `enum ibv_wr_opcode`.
pub type ibv_wr_opcode = c_uint;
/// `enum ibv_wc_status`.
pub type ibv_wc_status = c_uint;
/// `enum ibv_wc_opcode`.
pub type ibv_wc_opcode = c_uint;
/// `enum ibv_wc_flags` (a bit set stored in `ibv_wc::wc_flags`).
pub type ibv_wc_flags = c_uint;
/// `enum ibv_qp_attr_mask` (a bit set passed to `ibv_modify_qp` as `int`).
pub type ibv_qp_attr_mask = c_uint;
/// `enum ibv_mig_state`.
pub type ibv_mig_state = c_uint;
/// `enum ibv_atomic_cap`.
pub type ibv_atomic_cap = c_uint;
/// `enum ibv_node_type` (has the negative value `IBV_NODE_UNKNOWN`, hence `int`).
pub type ibv_node_type = c_int;
/// `enum ibv_transport_type` (has the negative value `IBV_TRANSPORT_UNKNOWN`, hence `int`).
pub type ibv_transport_type = c_int;

c_constants! {
    ibv_mtu {
        IBV_MTU_256 = 1,
        IBV_MTU_512 = 2,
        IBV_MTU_1024 = 3,
        IBV_MTU_2048 = 4,
        IBV_MTU_4096 = 5,
    }
    ibv_port_state {
        IBV_PORT_NOP = 0,
        IBV_PORT_DOWN = 1,
        IBV_PORT_INIT = 2,
        IBV_PORT_ARMED = 3,
        IBV_PORT_ACTIVE = 4,
        IBV_PORT_ACTIVE_DEFER = 5,
    }
    ibv_link_layer {
        IBV_LINK_LAYER_UNSPECIFIED = 0,
        IBV_LINK_LAYER_INFINIBAND = 1,
        IBV_LINK_LAYER_ETHERNET = 2,
    }
    ibv_qp_state {
        IBV_QPS_RESET = 0,
        IBV_QPS_INIT = 1,
        IBV_QPS_RTR = 2,
        IBV_QPS_RTS = 3,
        IBV_QPS_SQD = 4,
        IBV_QPS_SQE = 5,
        IBV_QPS_ERR = 6,
        IBV_QPS_UNKNOWN = 7,
    }
    ibv_qp_type {
        IBV_QPT_RC = 2,
        IBV_QPT_UC = 3,
        IBV_QPT_UD = 4,
    }
    ibv_access_flags {
        IBV_ACCESS_LOCAL_WRITE = 1,
        IBV_ACCESS_REMOTE_WRITE = 1 << 1,
        IBV_ACCESS_REMOTE_READ = 1 << 2,
        IBV_ACCESS_REMOTE_ATOMIC = 1 << 3,
    }
    ibv_send_flags {
        IBV_SEND_FENCE = 1,
        IBV_SEND_SIGNALED = 1 << 1,
        IBV_SEND_SOLICITED = 1 << 2,
        IBV_SEND_INLINE = 1 << 3,
    }
    ibv_wr_opcode {
        IBV_WR_RDMA_WRITE = 0,
        IBV_WR_RDMA_WRITE_WITH_IMM = 1,
        IBV_WR_SEND = 2,
        IBV_WR_SEND_WITH_IMM = 3,
        IBV_WR_RDMA_READ = 4,
    }
    ibv_wc_status {
        IBV_WC_SUCCESS = 0,
        IBV_WC_LOC_LEN_ERR = 1,
        IBV_WC_LOC_QP_OP_ERR = 2,
        IBV_WC_LOC_EEC_OP_ERR = 3,
        IBV_WC_LOC_PROT_ERR = 4,
        IBV_WC_WR_FLUSH_ERR = 5,
        IBV_WC_MW_BIND_ERR = 6,
        IBV_WC_BAD_RESP_ERR = 7,
        IBV_WC_LOC_ACCESS_ERR = 8,
        IBV_WC_REM_INV_REQ_ERR = 9,
        IBV_WC_REM_ACCESS_ERR = 10,
        IBV_WC_REM_OP_ERR = 11,
        IBV_WC_RETRY_EXC_ERR = 12,
        IBV_WC_RNR_RETRY_EXC_ERR = 13,
        IBV_WC_LOC_RDD_VIOL_ERR = 14,
        IBV_WC_REM_INV_RD_REQ_ERR = 15,
        IBV_WC_REM_ABORT_ERR = 16,
        IBV_WC_INV_EECN_ERR = 17,
        IBV_WC_INV_EEC_STATE_ERR = 18,
        IBV_WC_FATAL_ERR = 19,
        IBV_WC_RESP_TIMEOUT_ERR = 20,
        IBV_WC_GENERAL_ERR = 21,
    }
    ibv_wc_opcode {
        IBV_WC_SEND = 0,
        IBV_WC_RDMA_WRITE = 1,
        IBV_WC_RDMA_READ = 2,
        IBV_WC_COMP_SWAP = 3,
        IBV_WC_FETCH_ADD = 4,
        IBV_WC_BIND_MW = 5,
        IBV_WC_RECV = 1 << 7,
        IBV_WC_RECV_RDMA_WITH_IMM = (1 << 7) + 1,
    }
    ibv_wc_flags {
        IBV_WC_GRH = 1,
        IBV_WC_WITH_IMM = 1 << 1,
    }
    ibv_qp_attr_mask {
        IBV_QP_STATE = 1,
        IBV_QP_CUR_STATE = 1 << 1,
        IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
        IBV_QP_ACCESS_FLAGS = 1 << 3,
        IBV_QP_PKEY_INDEX = 1 << 4,
        IBV_QP_PORT = 1 << 5,
        IBV_QP_QKEY = 1 << 6,
        IBV_QP_AV = 1 << 7,
        IBV_QP_PATH_MTU = 1 << 8,
        IBV_QP_TIMEOUT = 1 << 9,
        IBV_QP_RETRY_CNT = 1 << 10,
        IBV_QP_RNR_RETRY = 1 << 11,
        IBV_QP_RQ_PSN = 1 << 12,
        IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
        IBV_QP_ALT_PATH = 1 << 14,
        IBV_QP_MIN_RNR_TIMER = 1 << 15,
        IBV_QP_SQ_PSN = 1 << 16,
        IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
        IBV_QP_PATH_MIG_STATE = 1 << 18,
        IBV_QP_CAP = 1 << 19,
        IBV_QP_DEST_QPN = 1 << 20,
        IBV_QP_RATE_LIMIT = 1 << 25,
    }
    ibv_mig_state {
        IBV_MIG_MIGRATED = 0,
        IBV_MIG_REARM = 1,
        IBV_MIG_ARMED = 2,
    }
    ibv_atomic_cap {
        IBV_ATOMIC_NONE = 0,
        IBV_ATOMIC_HCA = 1,
        IBV_ATOMIC_GLOB = 2,
    }
    ibv_node_type {
        IBV_NODE_UNKNOWN = -1,
        IBV_NODE_CA = 1,
    }
    ibv_transport_type {
        IBV_TRANSPORT_UNKNOWN = -1,
        IBV_TRANSPORT_IB = 0,
        IBV_TRANSPORT_IWARP = 1,
    }
}

/// The two private function pointers at the start of `struct ibv_device` (`struct
/// _ibv_device_ops`); never called by us.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct _ibv_device_ops {
    /// Private to libibverbs.
    pub _dummy1: *mut c_void,
    /// Private to libibverbs.
    pub _dummy2: *mut c_void,
}

/// `struct ibv_device`: one RDMA device as listed by `ibv_get_device_list`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device {
    /// Private to libibverbs.
    pub _ops: _ibv_device_ops,
    /// Node type (`IBV_NODE_*`).
    pub node_type: ibv_node_type,
    /// Transport type (`IBV_TRANSPORT_*`).
    pub transport_type: ibv_transport_type,
    /// Kernel device name, NUL-terminated (e.g. `mlx5_0`, `rxe0`).
    pub name: [c_char; 64],
    /// uverbs device name, NUL-terminated (e.g. `uverbs0`).
    pub dev_name: [c_char; 64],
    /// sysfs path of the uverbs class device.
    pub dev_path: [c_char; 256],
    /// sysfs path of the infiniband class device.
    pub ibdev_path: [c_char; 256],
}

/// `union ibv_gid`: a 128-bit GID.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    /// The GID's bytes, in network order.
    pub raw: [u8; 16],
    /// Subnet prefix and interface id (both big-endian).
    pub global: ibv_gid_global,
}

/// All zero (`::`).
impl Default for ibv_gid {
    fn default() -> Self {
        Self { raw: [0; 16] }
    }
}

impl std::fmt::Debug for ibv_gid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
        let raw = unsafe { self.raw };
        write!(f, "ibv_gid({raw:02x?})")
    }
}

/// The `global` member of [`ibv_gid`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_gid_global {
    /// Subnet prefix, big-endian.
    pub subnet_prefix: u64,
    /// Interface id, big-endian.
    pub interface_id: u64,
}

/// `struct ibv_device_attr`, filled by `ibv_query_device`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    /// Firmware version, NUL-terminated.
    pub fw_ver: [c_char; 64],
    /// Node GUID (big-endian).
    pub node_guid: u64,
    /// System image GUID (big-endian).
    pub sys_image_guid: u64,
    /// Largest registrable memory region.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum number of QPs.
    pub max_qp: c_int,
    /// Maximum outstanding work requests per queue.
    pub max_qp_wr: c_int,
    /// `IBV_DEVICE_*` capability bits.
    pub device_cap_flags: c_uint,
    /// Maximum scatter/gather entries per work request.
    pub max_sge: c_int,
    /// Maximum scatter/gather entries per RDMA read.
    pub max_sge_rd: c_int,
    /// Maximum number of CQs.
    pub max_cq: c_int,
    /// Maximum entries per CQ.
    pub max_cqe: c_int,
    /// Maximum number of MRs.
    pub max_mr: c_int,
    /// Maximum number of PDs.
    pub max_pd: c_int,
    /// Maximum outstanding RDMA reads/atomics per QP as target.
    pub max_qp_rd_atom: c_int,
    /// Maximum outstanding RDMA reads/atomics per EE context as target.
    pub max_ee_rd_atom: c_int,
    /// Maximum resources for incoming RDMA reads/atomics.
    pub max_res_rd_atom: c_int,
    /// Maximum outstanding RDMA reads/atomics per QP as initiator.
    pub max_qp_init_rd_atom: c_int,
    /// Maximum outstanding RDMA reads/atomics per EE context as initiator.
    pub max_ee_init_rd_atom: c_int,
    /// Atomic support (`IBV_ATOMIC_*`).
    pub atomic_cap: ibv_atomic_cap,
    /// Maximum EE contexts.
    pub max_ee: c_int,
    /// Maximum RD domains.
    pub max_rdd: c_int,
    /// Maximum memory windows.
    pub max_mw: c_int,
    /// Maximum raw IPv6 datagram QPs.
    pub max_raw_ipv6_qp: c_int,
    /// Maximum raw Ethertype datagram QPs.
    pub max_raw_ethy_qp: c_int,
    /// Maximum multicast groups.
    pub max_mcast_grp: c_int,
    /// Maximum QPs per multicast group.
    pub max_mcast_qp_attach: c_int,
    /// Maximum QPs attached to multicast groups in total.
    pub max_total_mcast_qp_attach: c_int,
    /// Maximum address handles.
    pub max_ah: c_int,
    /// Maximum FMRs.
    pub max_fmr: c_int,
    /// Maximum remaps per FMR.
    pub max_map_per_fmr: c_int,
    /// Maximum SRQs.
    pub max_srq: c_int,
    /// Maximum work requests per SRQ.
    pub max_srq_wr: c_int,
    /// Maximum scatter/gather entries per SRQ work request.
    pub max_srq_sge: c_int,
    /// P_Key table size.
    pub max_pkeys: u16,
    /// Local CA ack delay.
    pub local_ca_ack_delay: u8,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`, filled by `ibv_query_port`.
///
/// Its leading fields are `struct _compat_ibv_port_attr`, the type the exported
/// `ibv_query_port` symbol takes (see [`crate::Context::query_port`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_port_attr {
    /// Logical port state (`IBV_PORT_*`).
    pub state: ibv_port_state,
    /// Largest MTU the port supports (`IBV_MTU_*`).
    pub max_mtu: ibv_mtu,
    /// Active MTU (`IBV_MTU_*`).
    pub active_mtu: ibv_mtu,
    /// GID table length.
    pub gid_tbl_len: c_int,
    /// Port capability bits.
    pub port_cap_flags: u32,
    /// Largest message size.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// Base LID (InfiniBand).
    pub lid: u16,
    /// Subnet manager LID.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Maximum virtual lanes.
    pub max_vl_num: u8,
    /// Subnet manager service level.
    pub sm_sl: u8,
    /// Subnet propagation delay.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Active link width.
    pub active_width: u8,
    /// Active link speed.
    pub active_speed: u8,
    /// Physical port state.
    pub phys_state: u8,
    /// Link layer (`IBV_LINK_LAYER_*`).
    pub link_layer: u8,
    /// Port flags.
    pub flags: u8,
    /// More capability bits.
    pub port_cap_flags2: u16,
}

/// The bytes [`crate::Context::query_port`] leaves behind its `ibv_port_attr` for fields that
/// rdma-core releases newer than our declaration append (`active_speed_ex` in Debian trixie's
/// rdma-core, not in bookworm's, grows it from 52 to 56 bytes): the provider writes its own
/// release's struct.
pub const PORT_ATTR_ROOM_FOR_NEWER_FIELDS: usize = 64;

/// `struct _compat_ibv_port_attr`: what the exported `ibv_query_port` symbol is declared to
/// take. Incomplete in the C headers too; only ever used behind a pointer.
#[repr(C)]
pub struct _compat_ibv_port_attr {
    _opaque: [u8; 0],
}

/// `struct ibv_wc`: one work completion, as returned by `ibv_poll_cq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_wc {
    /// The work request's id.
    pub wr_id: u64,
    /// Completion status (`IBV_WC_*`; `IBV_WC_SUCCESS` is 0).
    pub status: ibv_wc_status,
    /// What completed (`IBV_WC_SEND`, `IBV_WC_RECV`, ...); valid only on success.
    pub opcode: ibv_wc_opcode,
    /// Vendor-specific error syndrome.
    pub vendor_err: u32,
    /// Bytes received (receive completions).
    pub byte_len: u32,
    /// Immediate data (network order) or invalidated rkey: a C anonymous union of two
    /// 32-bit members.
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD).
    pub src_qp: u32,
    /// `IBV_WC_*` flag bits.
    pub wc_flags: c_uint,
    /// P_Key index (GSI).
    pub pkey_index: u16,
    /// Source LID.
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits.
    pub dlid_path_bits: u8,
}

/// `struct ibv_pd`: a protection domain.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    /// The context it belongs to.
    pub context: *mut ibv_context,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_mr`: a registered memory region.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    /// The context it belongs to.
    pub context: *mut ibv_context,
    /// Its protection domain.
    pub pd: *mut ibv_pd,
    /// Start of the registered memory.
    pub addr: *mut c_void,
    /// Length of the registered memory.
    pub length: usize,
    /// Kernel handle.
    pub handle: u32,
    /// Local key, for scatter/gather entries.
    pub lkey: u32,
    /// Remote key, for the peer's RDMA reads and writes.
    pub rkey: u32,
}

/// `struct ibv_global_route`: the GRH part of an address vector (RoCE always uses it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_global_route {
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Flow label.
    pub flow_label: u32,
    /// Index of our source GID.
    pub sgid_index: u8,
    /// Hop limit (IPv6) / TTL (IPv4).
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`: an address vector.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_ah_attr {
    /// Global route (used when `is_global` is 1).
    pub grh: ibv_global_route,
    /// Destination LID (InfiniBand).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// 1 when `grh` is valid (always on RoCE).
    pub is_global: u8,
    /// Local port number.
    pub port_num: u8,
}

/// `struct ibv_qp_cap`: queue sizes of a QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_qp_cap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive.
    pub max_recv_sge: u32,
    /// Largest inline send (`IBV_SEND_INLINE`), in bytes.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`: what `ibv_create_qp` takes (and updates `cap` in).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr {
    /// User context returned in async events.
    pub qp_context: *mut c_void,
    /// CQ for send completions.
    pub send_cq: *mut ibv_cq,
    /// CQ for receive completions.
    pub recv_cq: *mut ibv_cq,
    /// Shared receive queue, or null.
    pub srq: *mut c_void,
    /// Requested queue sizes; the actual ones on return.
    pub cap: ibv_qp_cap,
    /// QP type (`IBV_QPT_*`).
    pub qp_type: ibv_qp_type,
    /// 1: every send completes with a CQE; 0: only those with `IBV_SEND_SIGNALED`.
    pub sq_sig_all: c_int,
}

/// `struct ibv_qp_attr`: what `ibv_modify_qp` takes (fields selected by the attribute mask).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_attr {
    /// Target state.
    pub qp_state: ibv_qp_state,
    /// Assumed current state.
    pub cur_qp_state: ibv_qp_state,
    /// Path MTU (`IBV_MTU_*`).
    pub path_mtu: ibv_mtu,
    /// Path migration state.
    pub path_mig_state: ibv_mig_state,
    /// Q_Key (UD).
    pub qkey: u32,
    /// First expected receive PSN.
    pub rq_psn: u32,
    /// First send PSN.
    pub sq_psn: u32,
    /// Remote QP number.
    pub dest_qp_num: u32,
    /// Remote access bits (`IBV_ACCESS_*`).
    pub qp_access_flags: c_uint,
    /// Queue sizes.
    pub cap: ibv_qp_cap,
    /// Primary path address vector.
    pub ah_attr: ibv_ah_attr,
    /// Alternate path address vector.
    pub alt_ah_attr: ibv_ah_attr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// SQD async notification.
    pub en_sqd_async_notify: u8,
    /// Whether the send queue is draining (query only).
    pub sq_draining: u8,
    /// Outstanding RDMA reads/atomics as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics as target.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Local port number.
    pub port_num: u8,
    /// Local ACK timeout (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retry count.
    pub retry_cnt: u8,
    /// RNR retry count (7 = infinite).
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate path timeout.
    pub alt_timeout: u8,
    /// Rate limit (kbps).
    pub rate_limit: u32,
}

/// `struct ibv_sge`: one scatter/gather entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_sge {
    /// Start address (inside a registered MR, or any readable memory for inline sends).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The MR's local key.
    pub lkey: u32,
}

/// The `wr.rdma` member of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_rdma {
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The `wr.atomic` member of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_atomic {
    /// Remote address.
    pub remote_addr: u64,
    /// Compare (CAS) or add (FAA) operand.
    pub compare_add: u64,
    /// Swap operand.
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The `wr.ud` member of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_ud {
    /// Address handle.
    pub ah: *mut c_void,
    /// Remote QP number.
    pub remote_qpn: u32,
    /// Remote Q_Key.
    pub remote_qkey: u32,
}

/// The `wr` union of [`ibv_send_wr`]: operation-specific fields.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    /// RDMA read/write.
    pub rdma: ibv_send_wr_rdma,
    /// Atomics.
    pub atomic: ibv_send_wr_atomic,
    /// UD sends.
    pub ud: ibv_send_wr_ud,
}

/// The `qp_type` union of [`ibv_send_wr`] (XRC only).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_qp_type {
    /// Remote SRQ number (XRC).
    pub remote_srqn: u32,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind_info {
    /// The MR the window binds to.
    pub mr: *mut ibv_mr,
    /// Start address.
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// Access bits.
    pub mw_access_flags: c_uint,
}

/// The `bind_mw` member of the last union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    /// The memory window.
    pub mw: *mut c_void,
    /// Its new rkey.
    pub rkey: u32,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// The `tso` member of the last union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_tso {
    /// Header.
    pub hdr: *mut c_void,
    /// Header size.
    pub hdr_sz: u16,
    /// Maximum segment size.
    pub mss: u16,
}

/// The last union of [`ibv_send_wr`] (anonymous in C; its members are `bind_mw` and `tso`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_bind_mw_or_tso {
    /// Memory-window bind.
    pub bind_mw: ibv_send_wr_bind_mw,
    /// TCP segmentation offload.
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr`: one send-queue work request; `next` chains a list.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Next request of the list, or null.
    pub next: *mut ibv_send_wr,
    /// Scatter/gather list.
    pub sg_list: *mut ibv_sge,
    /// Entries in `sg_list`.
    pub num_sge: c_int,
    /// Operation (`IBV_WR_*`).
    pub opcode: ibv_wr_opcode,
    /// `IBV_SEND_*` bits.
    pub send_flags: c_uint,
    /// Immediate data (network order) or rkey to invalidate: a C anonymous union of two
    /// 32-bit members.
    pub imm_data: u32,
    /// Operation-specific fields.
    pub wr: ibv_send_wr_wr,
    /// XRC fields.
    pub qp_type: ibv_send_wr_qp_type,
    /// Memory-window bind or TSO fields (a C anonymous union; `bind_mw` names its offset).
    pub bind_mw: ibv_send_wr_bind_mw_or_tso,
}

/// `struct ibv_recv_wr`: one receive-queue work request; `next` chains a list.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_recv_wr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Next request of the list, or null.
    pub next: *mut ibv_recv_wr,
    /// Scatter/gather list.
    pub sg_list: *mut ibv_sge,
    /// Entries in `sg_list`.
    pub num_sge: c_int,
}

/// `struct ibv_comp_channel`: a completion event channel (a file descriptor).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    /// The context it belongs to.
    pub context: *mut ibv_context,
    /// The descriptor that becomes readable when a completion event is queued.
    pub fd: c_int,
    /// Number of CQs using it.
    pub refcnt: c_int,
}

/// `struct ibv_cq`: a completion queue.
#[repr(C)]
pub struct ibv_cq {
    /// The context it belongs to; its `ops` table has `poll_cq` and `req_notify_cq`.
    pub context: *mut ibv_context,
    /// Its completion channel, or null.
    pub channel: *mut ibv_comp_channel,
    /// User context returned by `ibv_get_cq_event`.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Number of entries.
    pub cqe: c_int,
    /// Private to libibverbs.
    pub mutex: pthread_mutex_t,
    /// Private to libibverbs.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Async events acknowledged.
    pub async_events_completed: u32,
}

/// `struct ibv_qp`: a queue pair.
#[repr(C)]
pub struct ibv_qp {
    /// The context it belongs to; its `ops` table has `post_send` and `post_recv`.
    pub context: *mut ibv_context,
    /// User context.
    pub qp_context: *mut c_void,
    /// Its protection domain.
    pub pd: *mut ibv_pd,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// Shared receive queue, or null.
    pub srq: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// QP number (what the peer addresses).
    pub qp_num: u32,
    /// Last known state.
    pub state: ibv_qp_state,
    /// QP type.
    pub qp_type: ibv_qp_type,
    /// Private to libibverbs.
    pub mutex: pthread_mutex_t,
    /// Private to libibverbs.
    pub cond: pthread_cond_t,
    /// Async events acknowledged.
    pub events_completed: u32,
}

/// `ops.poll_cq`: what the inline `ibv_poll_cq` calls.
pub type ibv_poll_cq_fn =
    unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int;
/// `ops.req_notify_cq`: what the inline `ibv_req_notify_cq` calls.
pub type ibv_req_notify_cq_fn =
    unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
/// `ops.post_send`: what the inline `ibv_post_send` calls.
pub type ibv_post_send_fn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int;
/// `ops.post_recv`: what the inline `ibv_post_recv` calls.
pub type ibv_post_recv_fn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int;

/// The ops-table members we call, with the Rust type of each, for the conformance test:
/// `(member, return type, argument types)` as written in the aliases above.
pub const OPS_PROTOTYPES: &[Prototype] = &[
    Prototype {
        name: "poll_cq",
        ret: "c_int",
        args: &["*mut ibv_cq", "c_int", "*mut ibv_wc"],
    },
    Prototype {
        name: "req_notify_cq",
        ret: "c_int",
        args: &["*mut ibv_cq", "c_int"],
    },
    Prototype {
        name: "post_send",
        ret: "c_int",
        args: &["*mut ibv_qp", "*mut ibv_send_wr", "*mut *mut ibv_send_wr"],
    },
    Prototype {
        name: "post_recv",
        ret: "c_int",
        args: &["*mut ibv_qp", "*mut ibv_recv_wr", "*mut *mut ibv_recv_wr"],
    },
];

/// `struct ibv_context_ops`: the provider's function table inside every context. Members named
/// `_compat_*` are unused slots kept for the ABI; we call only the four data-path members.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_context_ops {
    /// Unused slot.
    pub _compat_query_device: *mut c_void,
    /// Unused slot.
    pub _compat_query_port: *mut c_void,
    /// Unused slot.
    pub _compat_alloc_pd: *mut c_void,
    /// Unused slot.
    pub _compat_dealloc_pd: *mut c_void,
    /// Unused slot.
    pub _compat_reg_mr: *mut c_void,
    /// Unused slot.
    pub _compat_rereg_mr: *mut c_void,
    /// Unused slot.
    pub _compat_dereg_mr: *mut c_void,
    /// Memory-window allocation (not used by us).
    pub alloc_mw: *mut c_void,
    /// Memory-window bind (not used by us).
    pub bind_mw: *mut c_void,
    /// Memory-window release (not used by us).
    pub dealloc_mw: *mut c_void,
    /// Unused slot.
    pub _compat_create_cq: *mut c_void,
    /// `ibv_poll_cq`.
    pub poll_cq: Option<ibv_poll_cq_fn>,
    /// `ibv_req_notify_cq`.
    pub req_notify_cq: Option<ibv_req_notify_cq_fn>,
    /// Unused slot.
    pub _compat_cq_event: *mut c_void,
    /// Unused slot.
    pub _compat_resize_cq: *mut c_void,
    /// Unused slot.
    pub _compat_destroy_cq: *mut c_void,
    /// Unused slot.
    pub _compat_create_srq: *mut c_void,
    /// Unused slot.
    pub _compat_modify_srq: *mut c_void,
    /// Unused slot.
    pub _compat_query_srq: *mut c_void,
    /// Unused slot.
    pub _compat_destroy_srq: *mut c_void,
    /// `ibv_post_srq_recv` (not used by us).
    pub post_srq_recv: *mut c_void,
    /// Unused slot.
    pub _compat_create_qp: *mut c_void,
    /// Unused slot.
    pub _compat_query_qp: *mut c_void,
    /// Unused slot.
    pub _compat_modify_qp: *mut c_void,
    /// Unused slot.
    pub _compat_destroy_qp: *mut c_void,
    /// `ibv_post_send`.
    pub post_send: Option<ibv_post_send_fn>,
    /// `ibv_post_recv`.
    pub post_recv: Option<ibv_post_recv_fn>,
    /// Unused slot.
    pub _compat_create_ah: *mut c_void,
    /// Unused slot.
    pub _compat_destroy_ah: *mut c_void,
    /// Unused slot.
    pub _compat_attach_mcast: *mut c_void,
    /// Unused slot.
    pub _compat_detach_mcast: *mut c_void,
    /// Unused slot.
    pub _compat_async_event: *mut c_void,
}

/// `struct ibv_context`: an open device.
#[repr(C)]
pub struct ibv_context {
    /// The device it was opened from.
    pub device: *mut ibv_device,
    /// The provider's function table.
    pub ops: ibv_context_ops,
    /// Command descriptor.
    pub cmd_fd: c_int,
    /// Async event descriptor.
    pub async_fd: c_int,
    /// Number of completion vectors.
    pub num_comp_vectors: c_int,
    /// Private to libibverbs.
    pub mutex: pthread_mutex_t,
    /// Private to libibverbs.
    pub abi_compat: *mut c_void,
}

/// One function prototype as declared in Rust (types as written), for the conformance test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prototype {
    /// The C function (or ops-table member) name.
    pub name: &'static str,
    /// The return type as written in Rust (`()` for none).
    pub ret: &'static str,
    /// The argument types as written in Rust.
    pub args: &'static [&'static str],
}

/// Declares the exported libibverbs functions we resolve: a table of function pointers
/// ([`Functions`]) and their prototypes ([`PROTOTYPES`]) from one list.
macro_rules! verbs_functions {
    ($( $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?; )*) => {
        /// The exported functions of `libibverbs.so.1` we call, resolved with `dlsym`.
        #[derive(Debug, Clone, Copy)]
        pub struct Functions {
            $( $(#[$m])* pub $name: unsafe extern "C" fn($($arg: $ty),*) $(-> $ret)?, )*
        }

        impl Functions {
            /// Resolves every function from `lib`.
            ///
            /// # Safety
            /// `lib` must be rdma-core's `libibverbs.so.1` (whose symbols have the prototypes
            /// declared here), and the returned pointers must not be called after `lib` is
            /// unloaded.
            pub unsafe fn load(lib: &libloading::Library) -> Result<Self, (&'static str, libloading::Error)> {
                Ok(Self {
                    $( $name: {
                        let name = concat!(stringify!($name), "\0");
                        let sym: libloading::Symbol<'_, unsafe extern "C" fn($($ty),*) $(-> $ret)?> =
                            // SAFETY: the caller guarantees `lib` is libibverbs, whose symbol
                            // has exactly this prototype (checked by the conformance test).
                            unsafe { lib.get(name.as_bytes()) }
                                .map_err(|e| (stringify!($name), e))?;
                        *sym
                    }, )*
                })
            }
        }

        /// The prototypes of [`Functions`], as written in Rust, for the conformance test.
        pub const PROTOTYPES: &[Prototype] = &[
            $( Prototype {
                name: stringify!($name),
                ret: verbs_functions!(@ret $($ret)?),
                args: &[$(stringify!($ty)),*],
            }, )*
        ];
    };
    (@ret) => { "()" };
    (@ret $ret:ty) => { stringify!($ret) };
}

verbs_functions! {
    /// `ibv_get_device_list(3)`: a NULL-terminated array of devices; sets errno on failure.
    fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device;
    /// `ibv_free_device_list(3)`.
    fn ibv_free_device_list(list: *mut *mut ibv_device);
    /// `ibv_get_device_name(3)`.
    fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char;
    /// `ibv_open_device(3)`; null and errno on failure.
    fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    /// `ibv_close_device(3)`.
    fn ibv_close_device(context: *mut ibv_context) -> c_int;
    /// `ibv_query_device(3)`; returns an errno value.
    fn ibv_query_device(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int;
    /// The exported `ibv_query_port` symbol (`ibv_query_port(3)` is a macro over it in current
    /// headers); returns an errno value.
    fn ibv_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut _compat_ibv_port_attr) -> c_int;
    /// `ibv_query_gid(3)`; returns 0 or -1.
    fn ibv_query_gid(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid) -> c_int;
    /// `ibv_alloc_pd(3)`; null and errno on failure.
    fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    /// `ibv_dealloc_pd(3)`; returns an errno value.
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    /// `ibv_reg_mr(3)` (the exported symbol; the header's macro calls it for constant access
    /// flags without optional bits); null and errno on failure.
    fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
    /// `ibv_dereg_mr(3)`; returns an errno value.
    fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    /// `ibv_create_comp_channel(3)`; null and errno on failure.
    fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    /// `ibv_destroy_comp_channel(3)`; returns an errno value.
    fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    /// `ibv_create_cq(3)`; null and errno on failure.
    fn ibv_create_cq(context: *mut ibv_context, cqe: c_int, cq_context: *mut c_void, channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq;
    /// `ibv_destroy_cq(3)`; returns an errno value.
    fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    /// `ibv_get_cq_event(3)`; 0, or -1 and errno (EAGAIN on a non-blocking channel).
    fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int;
    /// `ibv_ack_cq_events(3)`.
    fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint);
    /// `ibv_create_qp(3)`; null and errno on failure.
    fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    /// `ibv_modify_qp(3)`; returns an errno value.
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int;
    /// `ibv_destroy_qp(3)`; returns an errno value.
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
}
