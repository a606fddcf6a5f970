//! The client-address rule as tables: ranges, both headers' syntax, the walk from the right,
//! and the bounds.

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ranges(list: &[&str]) -> Vec<Cidr> {
    list.iter().map(|c| c.parse().unwrap()).collect()
}

/// The client behind `peer` trusting `trusted`, from `Forwarded` lines `fwd` and
/// `X-Forwarded-For` lines `xff`.
fn client(peer: &str, trusted: &[&str], fwd: &[&str], xff: &[&str]) -> String {
    let fwd: Vec<&[u8]> = fwd.iter().map(|l| l.as_bytes()).collect();
    let xff: Vec<&[u8]> = xff.iter().map(|l| l.as_bytes()).collect();
    client_addr(ip(peer), &ranges(trusted), &fwd, &xff).to_string()
}

#[test]
fn ranges_parse_contain_and_refuse_what_is_no_range() {
    let table: &[(&str, &[&str], &[&str])] = &[
        (
            "10.0.0.0/8",
            &["10.0.0.1", "10.255.255.255", "::ffff:10.1.2.3"],
            &["11.0.0.1", "::a00:1"],
        ),
        ("127.0.0.1", &["127.0.0.1"], &["127.0.0.2"]),
        ("0.0.0.0/0", &["1.2.3.4", "255.255.255.255"], &["::1"]),
        ("2001:db8::/32", &["2001:db8::1", "2001:db8:ffff::9"], &["2001:db9::1", "10.0.0.1"]),
        ("::1/128", &["::1"], &["::2"]),
        ("::/0", &["2001:db8::1", "::1"], &["1.2.3.4"]),
    ];
    for (range, inside, outside) in table {
        let c: Cidr = range.parse().unwrap_or_else(|e| panic!("{range}: {e}"));
        for a in *inside {
            assert!(c.contains(ip(a)), "{a} in {range}");
        }
        for a in *outside {
            assert!(!c.contains(ip(a)), "{a} not in {range}");
        }
    }
    assert_eq!("127.0.0.1".parse::<Cidr>().unwrap().to_string(), "127.0.0.1/32");
    for bad in [
        "",
        "10.0.0/8",
        "10.0.0.0/33",
        "2001:db8::/129",
        "10.0.0.1/8",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "10.0.0.0/8/8",
        "example.com/8",
        "10.0.0.0/0008",
        "[::1]/128",
    ] {
        let e = bad.parse::<Cidr>().expect_err(bad);
        assert!(e.to_string().contains("CIDR"), "{bad}: {e}");
    }
}

#[test]
fn ranges_read_and_write_as_strings_in_the_config() {
    let v: Vec<Cidr> =
        serde_json::from_value(serde_json::json!(["10.0.0.0/8", "2001:db8::/32"])).unwrap();
    assert_eq!(
        serde_json::to_value(&v).unwrap(),
        serde_json::json!(["10.0.0.0/8", "2001:db8::/32"])
    );
    let e = serde_json::from_value::<Vec<Cidr>>(serde_json::json!(["10.0.0.1/8"])).unwrap_err();
    assert!(e.to_string().contains("host bits"), "{e}");
}

#[test]
fn headers_from_a_peer_that_is_not_trusted_are_ignored() {
    let t = &["10.0.0.0/8"];
    assert_eq!(client("192.0.2.9", t, &["for=198.51.100.1"], &[]), "192.0.2.9");
    assert_eq!(client("192.0.2.9", t, &[], &["198.51.100.1"]), "192.0.2.9");
    assert_eq!(
        client("10.0.0.1", &[], &[], &["198.51.100.1"]),
        "10.0.0.1",
        "nothing trusted: the peer"
    );
    assert_eq!(client("::ffff:192.0.2.9", t, &[], &["198.51.100.1"]), "192.0.2.9", "canonical");
}

#[test]
fn x_forwarded_for_is_walked_from_the_right_to_the_first_address_not_trusted() {
    let t = &["10.0.0.0/8", "127.0.0.0/8"];
    let table: &[(&[&str], &str)] = &[
        (&["198.51.100.1"], "198.51.100.1"),
        // A client-supplied first hop is to the left of the real one: never believed.
        (&["203.0.113.66, 198.51.100.1"], "198.51.100.1"),
        (&["203.0.113.66, 198.51.100.1, 10.0.0.2"], "198.51.100.1"),
        (&["203.0.113.66", "198.51.100.1, 10.0.0.2"], "198.51.100.1"),
        // Every hop trusted: the left-most.
        (&["10.1.1.1, 10.0.0.2"], "10.1.1.1"),
        (&["198.51.100.1:4711"], "198.51.100.1"),
        (&["[2001:db8::1]:4711"], "2001:db8::1"),
        (&["2001:db8::1"], "2001:db8::1"),
        (&["  198.51.100.1 ,,  "], "198.51.100.1"),
        (&["::ffff:198.51.100.1"], "198.51.100.1"),
        // What is no address, met on the walk: the peer.
        (&["unknown"], "127.0.0.1"),
        (&["198.51.100.1, _hidden"], "127.0.0.1"),
        (&["198.51.100.1, garbage, 10.0.0.2"], "127.0.0.1"),
        (&["198.51.100.1:99999"], "127.0.0.1"),
        (&["[2001:db8::1"], "127.0.0.1"),
        // ... but not to the left of the client.
        (&["garbage, 198.51.100.1"], "198.51.100.1"),
        (&[""], "127.0.0.1"),
    ];
    for (xff, want) in table {
        assert_eq!(client("127.0.0.1", t, &[], xff), *want, "{xff:?}");
    }
}

#[test]
fn forwarded_decides_when_present_with_its_syntax_ports_quotes_and_case() {
    let t = &["127.0.0.0/8", "10.0.0.0/8"];
    let table: &[(&[&str], &str)] = &[
        (&["for=198.51.100.1"], "198.51.100.1"),
        (&["For=198.51.100.1;Proto=https;By=10.0.0.1"], "198.51.100.1"),
        (&["proto=https;for=\"198.51.100.1:4711\""], "198.51.100.1"),
        (&["for=\"[2001:db8::1]:4711\""], "2001:db8::1"),
        (&["for=\"[2001:db8::1]\""], "2001:db8::1"),
        (&["for=\"[2001:db8::1]:_port\""], "2001:db8::1"),
        (&["for=203.0.113.66, for=198.51.100.1"], "198.51.100.1"),
        (&["for=203.0.113.66", "for=198.51.100.1;by=\"a,b\", for=10.0.0.3"], "198.51.100.1"),
        (&["for=10.9.9.9 , for=10.0.0.3"], "10.9.9.9"),
        (&["for=198.51.100.1,,"], "198.51.100.1"),
        // Obfuscated or unknown: the peer.
        (&["for=_hidden"], "127.0.0.1"),
        (&["for=unknown"], "127.0.0.1"),
        (&["for=UNKNOWN, for=10.0.0.3"], "127.0.0.1"),
        (&["proto=https"], "127.0.0.1"),
        (&["for=\"198.51.100\\.1\""], "127.0.0.1"),
        // Broken syntax anywhere: the peer.
        (&["for=198.51.100.1;"], "127.0.0.1"),
        (&["for=\"198.51.100.1"], "127.0.0.1"),
        (&["for=198.51.100.1;for=198.51.100.2"], "127.0.0.1"),
        (&["for = 198.51.100.1"], "127.0.0.1"),
        (&["=198.51.100.1"], "127.0.0.1"),
        (&["for=[2001:db8::1]"], "127.0.0.1"),
        (&["for=198.51.100.1 for=1.2.3.4"], "127.0.0.1"),
        (&["for=198.51.100.1", "for=\"x"], "127.0.0.1"),
    ];
    for (fwd, want) in table {
        assert_eq!(client("127.0.0.1", t, fwd, &["203.0.113.7"]), *want, "{fwd:?}");
    }
    assert_eq!(
        client("127.0.0.1", t, &[], &["203.0.113.7"]),
        "203.0.113.7",
        "X-Forwarded-For only without Forwarded"
    );
}

#[test]
fn long_chains_are_bounded_and_cost_linear_time() {
    let t = &["10.0.0.0/8"];
    let trusted_hops =
        |n: usize| (0..n).map(|i| format!("10.0.{}.{}", i / 256, i % 256)).collect::<Vec<_>>();
    let chain = |n: usize| format!("198.51.100.1, {}", trusted_hops(n).join(", "));
    assert_eq!(
        client("10.0.0.1", t, &[], &[&chain(MAX_HOPS - 1)]),
        "198.51.100.1",
        "within the bound"
    );
    assert_eq!(
        client("10.0.0.1", t, &[], &[&chain(MAX_HOPS)]),
        "10.0.0.1",
        "more trusted hops than the bound: not believed"
    );
    // The client within the last MAX_HOPS hops is found whatever lies to its left.
    let long = format!("{}, 198.51.100.1", "203.0.113.1, ".repeat(100_000));
    assert_eq!(client("10.0.0.1", t, &[], &[&long]), "198.51.100.1");
    let long_fwd = format!("{}for=198.51.100.1", "for=203.0.113.1;proto=http, ".repeat(100_000));
    assert_eq!(client("10.0.0.1", t, &[&long_fwd], &[]), "198.51.100.1");
    // One enormous hop is no address.
    assert_eq!(client("10.0.0.1", t, &[], &[&"1".repeat(1 << 20)]), "10.0.0.1");
    let quoted = format!("for=\"{}\"", "a".repeat(1 << 20));
    assert_eq!(client("10.0.0.1", t, &[&quoted], &[]), "10.0.0.1");
}
