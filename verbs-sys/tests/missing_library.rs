//! Where libibverbs.so.1 cannot be loaded, every entry point says so, with the install hint.
//! (Its own test binary: the library is loaded once per process.)

#[test]
fn an_absent_library_is_reported_clearly() {
    std::env::set_var(verbs_sys::LIBRARY_ENV, "/nonexistent/libibverbs.so.1");
    assert!(!verbs_sys::Library::available());
    let e = verbs_sys::DeviceList::new().expect_err("no library, no device list");
    assert!(matches!(e, verbs_sys::Error::Unavailable(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "libibverbs.so.1 not found (install rdma-core: apt-get install libibverbs1 ibverbs-providers)"
    );
}
