//! rdma-core verbs for rdma-container, without build-time dependencies.
//!
//! * [`ffi`]: our own declarations of the libibverbs subset we use (structs, enum values,
//!   function prototypes), written from the documented rdma-core ABI and checked against the
//!   real headers by `tests/conformance.rs`.
//! * [`Library`]: `libibverbs.so.1`, opened with `dlopen` on first use, so a binary built with
//!   this crate starts where rdma-core is absent and can say why verbs is unavailable
//!   ([`Error::Unavailable`]).
//! * A small safe-ish layer ([`DeviceList`], [`Context`], [`ProtectionDomain`],
//!   [`MemoryRegion`], [`CompletionChannel`], [`CompletionQueue`], [`QueuePair`],
//!   [`SendList`], [`RecvList`]) that owns each object, destroys it in the right order and keeps
//!   the errno of every failure. The data-path calls (`post_send`, `post_recv`, `poll_cq`,
//!   `req_notify_cq`) go through the context's ops table exactly as rdma-core's inline
//!   functions do: no system call of ours on the fast path. What a fast path needs is there:
//!   inline sends (`IBV_SEND_INLINE`, checked against the QP's `max_inline_data`), unsignaled
//!   sends (`sq_sig_all = 0` plus `IBV_SEND_SIGNALED` where wanted), lists of work requests
//!   posted with one call, and polling many completions at once.
//!
//! Building needs only `cargo` (no headers, no cmake, no libclang); the conformance test needs
//! a C compiler and `libibverbs-dev`.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]

pub mod ffi;
mod verbs;

use std::io;
use std::sync::OnceLock;

pub use verbs::{
    CompletionChannel, CompletionQueue, Context, Deregistration, Device, DeviceList, MemoryRegion,
    ProtectionDomain, QpInit, QueuePair, RecvList, SendList,
};

/// The library we load.
pub const LIBRARY: &str = "libibverbs.so.1";

/// Environment variable naming another file to load instead of [`LIBRARY`] (tests use it to
/// play a host without rdma-core). A set-uid, set-gid or file-capability process (secure
/// execution: `AT_SECURE`) ignores it, as the dynamic loader ignores `LD_LIBRARY_PATH` there:
/// the environment must not choose the code such a process runs.
pub const LIBRARY_ENV: &str = "VERBS_SYS_LIBIBVERBS";

/// Whether this process runs in secure-execution mode (set-uid/set-gid/file capabilities).
fn secure_execution() -> bool {
    // SAFETY: getauxval only reads the auxiliary vector the kernel gave this process.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The file to load: [`LIBRARY`], or what [`LIBRARY_ENV`] says (`from_env`) outside secure
/// execution.
fn library_name(from_env: Option<std::ffi::OsString>, secure: bool) -> std::ffi::OsString {
    match from_env {
        Some(name) if !secure => name,
        _ => LIBRARY.into(),
    }
}

#[cfg(test)]
mod library_name_tests {
    use super::*;

    #[test]
    fn the_environment_chooses_the_library_only_outside_secure_execution() {
        let other = Some(std::ffi::OsString::from("/tmp/evil.so"));
        assert_eq!(library_name(other.clone(), false), "/tmp/evil.so");
        assert_eq!(library_name(other, true), LIBRARY);
        assert_eq!(library_name(None, false), LIBRARY);
        // This test process is not set-uid.
        assert!(!secure_execution());
    }
}

/// What to install when the library is missing.
pub const INSTALL_HINT: &str = "install rdma-core: apt-get install libibverbs1 ibverbs-providers";

/// Everything that can fail in this crate; verbs failures keep their errno.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `libibverbs.so.1` could not be loaded (rdma-core is not installed) or lacks a symbol.
    #[error("{0}")]
    Unavailable(String),

    /// A verb failed; `source` carries its errno.
    #[error("{verb} failed: {source}")]
    Verb {
        /// The verb, e.g. `ibv_modify_qp`.
        verb: &'static str,
        /// The OS error (errno) it reported.
        #[source]
        source: io::Error,
    },

    /// Posting a list of work requests failed at entry `index` (those before it were posted).
    #[error("{verb} failed at work request {index} of the list: {source}")]
    Post {
        /// `ibv_post_send` or `ibv_post_recv`.
        verb: &'static str,
        /// Index of the first request that was not posted.
        index: usize,
        /// The errno the provider returned.
        #[source]
        source: io::Error,
    },

    /// An `IBV_SEND_INLINE` request is longer than the QP's `max_inline_data`.
    #[error("inline send of {len} bytes exceeds the queue pair's max_inline_data of {max}")]
    InlineTooLarge {
        /// Bytes in the request.
        len: usize,
        /// The QP's limit.
        max: u32,
    },

    /// A list has more work requests than a C `int` counts, or a request more entries.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// The errno behind this error, when it came from a verb.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verb { source, .. } | Error::Post { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `libibverbs.so.1`, loaded once and never unloaded, with the functions we resolved.
pub struct Library {
    fns: ffi::Functions,
    _lib: libloading::Library,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Library(libibverbs)")
    }
}

impl Library {
    /// The library, loaded on first call (later calls return the same result).
    pub fn get() -> Result<&'static Library> {
        static LOADED: OnceLock<std::result::Result<Library, String>> = OnceLock::new();
        LOADED
            .get_or_init(Self::load)
            .as_ref()
            .map_err(|e| Error::Unavailable(e.clone()))
    }

    /// Whether `libibverbs.so.1` can be loaded here.
    pub fn available() -> bool {
        Self::get().is_ok()
    }

    fn load() -> std::result::Result<Library, String> {
        let name = library_name(std::env::var_os(LIBRARY_ENV), secure_execution());
        // SAFETY: loading libibverbs runs its initialisers, which are sound to run at any time
        // (rdma-core is loaded with dlopen by many programs, e.g. through librdmacm).
        let lib = unsafe { libloading::Library::new(&name) }.map_err(|e| {
            let detail = e.to_string();
            if detail.contains("No such file") || detail.contains("cannot open shared object") {
                format!("{LIBRARY} not found ({INSTALL_HINT})")
            } else {
                format!("cannot load {LIBRARY} ({detail}; {INSTALL_HINT})")
            }
        })?;
        // SAFETY: `lib` is libibverbs.so.1 (or a file the user named in its place), and the
        // pointers live in the same `Library` as `lib`, which is never dropped (a static).
        let fns = unsafe { ffi::Functions::load(&lib) }.map_err(|(symbol, e)| {
            format!(
                "{LIBRARY} lacks {symbol} ({e}); rdma-core is too old or broken: {INSTALL_HINT}"
            )
        })?;
        Ok(Library { fns, _lib: lib })
    }

    /// The resolved functions.
    pub fn functions(&self) -> &ffi::Functions {
        &self.fns
    }
}

/// Turns a verb's `int` result into a `Result`, keeping the errno: 0 is success; a positive
/// value is the errno itself (most verbs); a negative one means "see errno" (e.g.
/// `ibv_get_cq_event`), or, when errno is unset, EIO.
pub fn check(verb: &'static str, rc: std::ffi::c_int) -> Result<()> {
    match rc {
        0 => Ok(()),
        rc if rc > 0 => Err(Error::Verb {
            verb,
            source: io::Error::from_raw_os_error(rc),
        }),
        _ => {
            let source = io::Error::last_os_error();
            let source = match source.raw_os_error() {
                Some(0) | None => io::Error::from_raw_os_error(libc::EIO),
                Some(_) => source,
            };
            Err(Error::Verb { verb, source })
        }
    }
}
