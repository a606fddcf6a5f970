//! The operating system's CSPRNG, in one place (session ids, cursor keys, client request ids).

/// `N` random bytes.
///
/// # Panics
/// If the operating system has no CSPRNG (the process cannot run safely without one).
pub(crate) fn bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the operating system CSPRNG is available");
    b
}
