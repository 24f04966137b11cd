//! GID values: parsing, formatting and the IPv4-mapped form.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Serializer;

/// The GID RoCE v2 uses for an IPv4 address: the IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
pub fn gid_from_ipv4(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// Parses a GID as sysfs prints it (`0000:0000:0000:0000:0000:ffff:0a07:9f47`) or in any other
/// IPv6 text form (`::ffff:10.7.159.71`, `fe80::1`). Surrounding whitespace is ignored.
///
/// Returns `None` for anything that is not an IPv6 address.
pub fn parse_gid(s: &str) -> Option<[u8; 16]> {
    s.trim().parse::<Ipv6Addr>().ok().map(|a| a.octets())
}

/// Formats a GID in sysfs style: eight full 4-hex-digit groups separated by `:`.
pub fn gid_string(gid: &[u8; 16]) -> String {
    let groups: Vec<String> = gid
        .chunks_exact(2)
        .map(|g| format!("{:02x}{:02x}", g[0], g[1]))
        .collect();
    groups.join(":")
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), else `None`.
pub(crate) fn gid_ipv4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    Ipv6Addr::from(*gid).to_ipv4_mapped()
}

/// True for an all-zero GID (an empty table slot).
pub(crate) fn is_zero(gid: &[u8; 16]) -> bool {
    gid.iter().all(|&b| b == 0)
}

/// True for `fe80::` with an all-zero interface identifier (`show_gids` hides these).
pub(crate) fn is_bare_link_local(gid: &[u8; 16]) -> bool {
    gid[0] == 0xfe && gid[1] == 0x80 && gid[2..].iter().all(|&b| b == 0)
}

/// Serde helper: a GID as its sysfs string.
pub(crate) fn serialize_gid<S: Serializer>(gid: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&gid_string(gid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_sysfs_form() {
        let g = parse_gid("0000:0000:0000:0000:0000:ffff:0a07:9f47\n");
        assert_eq!(g, Some(gid_from_ipv4(Ipv4Addr::new(10, 7, 159, 71))));
    }

    #[test]
    fn parses_compressed_forms() {
        let want = Some(gid_from_ipv4(Ipv4Addr::new(192, 168, 1, 2)));
        assert_eq!(parse_gid("::ffff:192.168.1.2"), want);
        assert_eq!(parse_gid("::ffff:c0a8:102"), want);
        let ll = parse_gid("fe80::ba59:9fff:fe1a:e4c2");
        assert_eq!(
            ll.map(|g| gid_string(&g)).as_deref(),
            Some("fe80:0000:0000:0000:ba59:9fff:fe1a:e4c2")
        );
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse_gid(""), None);
        assert_eq!(parse_gid("10.0.0.1"), None);
        assert_eq!(parse_gid("0000:0000:0000:0000:0000:ffff:0a07"), None);
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:0a07:9f47:0000"),
            None
        );
        assert_eq!(parse_gid("gggg::1"), None);
    }

    #[test]
    fn formats_full_groups() {
        assert_eq!(
            gid_string(&gid_from_ipv4(Ipv4Addr::new(10, 0, 0, 1))),
            "0000:0000:0000:0000:0000:ffff:0a00:0001"
        );
        assert_eq!(
            gid_string(&[0; 16]),
            "0000:0000:0000:0000:0000:0000:0000:0000"
        );
    }

    #[test]
    fn ipv4_only_for_mapped() {
        let mapped = gid_from_ipv4(Ipv4Addr::new(1, 2, 3, 4));
        assert_eq!(gid_ipv4(&mapped), Some(Ipv4Addr::new(1, 2, 3, 4)));
        let compat = parse_gid("::1.2.3.4").unwrap_or_default();
        assert_eq!(gid_ipv4(&compat), None);
        let ll = parse_gid("fe80::1").unwrap_or_default();
        assert_eq!(gid_ipv4(&ll), None);
    }

    #[test]
    fn zero_and_bare_link_local() {
        assert!(is_zero(&[0; 16]));
        assert!(!is_zero(&gid_from_ipv4(Ipv4Addr::new(0, 0, 0, 0))));
        let bare = parse_gid("fe80::").unwrap_or_default();
        assert!(is_bare_link_local(&bare));
        let ll = parse_gid("fe80::1").unwrap_or_default();
        assert!(!is_bare_link_local(&ll));
    }

    proptest! {
        #[test]
        fn string_round_trip(bytes in proptest::array::uniform16(any::<u8>())) {
            let s = gid_string(&bytes);
            prop_assert_eq!(s.len(), 39);
            prop_assert_eq!(parse_gid(&s), Some(bytes));
        }

        #[test]
        fn mapped_round_trip(a in any::<u32>()) {
            let ip = Ipv4Addr::from(a);
            let g = gid_from_ipv4(ip);
            prop_assert_eq!(gid_ipv4(&g), Some(ip));
            prop_assert_eq!(parse_gid(&format!("::ffff:{ip}")), Some(g));
        }
    }
}
