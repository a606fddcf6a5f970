//! The operating system's CSPRNG, in one place (session ids, cursor keys, client request ids).
//!
//! Drawn through a small per-thread buffer: a session's `initialize` takes a few dozen bytes,
//! and a `getrandom` call of its own for each draw was about 1 % of its CPU (the system call
//! and the kernel's per-call key setup). Every byte comes from the operating system, is
//! handed out once, and is zeroed as it leaves the buffer. What a thread has not drawn yet
//! (at most 1 KiB) stays in its memory until drawn, and is not cleared when the thread ends.
//! A process that forked after a draw would hand out the same bytes in parent and child: the
//! host never forks, and a program embedding the runtime must not fork and go on using it.

use std::cell::RefCell;

/// How many bytes a thread fetches at a time.
const BUFFER: usize = 1024;

struct Pool {
    bytes: [u8; BUFFER],
    /// Where the bytes not handed out yet begin.
    next: usize,
}

thread_local! {
    static POOL: RefCell<Pool> = const { RefCell::new(Pool { bytes: [0; BUFFER], next: BUFFER }) };
}

/// `N` random bytes.
///
/// # Panics
/// If the operating system has no CSPRNG (the process cannot run safely without one).
pub(crate) fn bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if N > BUFFER / 4 {
        getrandom::fill(&mut b).expect("the operating system CSPRNG is available");
        return b;
    }
    POOL.with_borrow_mut(|p| {
        if BUFFER - p.next < N {
            getrandom::fill(&mut p.bytes).expect("the operating system CSPRNG is available");
            p.next = 0;
        }
        let taken = &mut p.bytes[p.next..p.next + N];
        b.copy_from_slice(taken);
        taken.fill(0);
        p.next += N;
    });
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_never_repeat_bytes_across_a_refill() {
        // 32-byte draws across several refills: a byte handed out twice (the pool not
        // advancing, or a refill skipped) would repeat a whole draw.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..(3 * BUFFER / 32 + 5) {
            assert!(seen.insert(bytes::<32>()), "a draw repeated");
        }
        // A draw larger than the pool's share comes straight from the system.
        let big = bytes::<{ BUFFER / 2 }>();
        assert!(big.iter().any(|&x| x != 0));
        // Odd sizes leave the rest of the pool in use.
        let (a, b) = (bytes::<7>(), bytes::<7>());
        assert_ne!(a, b);
    }

    #[test]
    fn the_bytes_handed_out_are_zeroed_in_the_pool() {
        let _ = bytes::<16>();
        POOL.with_borrow(|p| {
            assert!(p.next >= 16);
            assert!(p.bytes[p.next - 16..p.next].iter().all(|&x| x == 0));
        });
    }
}
