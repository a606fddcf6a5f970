//! The call boundary of handlers: a tool, resource or prompt that panics (in the code that
//! makes its future, or in any poll of it) ends its own call, never the session actor or the
//! task polling it. The panic becomes [`Panicked`]; its caller answers the one error table's
//! internal error (`-32603`, generic text), and the panic's text goes only to the log.
//!
//! Unwind safety is asserted, not proven: after a panic the handler's future is dropped and
//! never polled again, the catalog is immutable, and our locks are `parking_lot` ones (no
//! poisoning). State a handler shares with others (its own mutexes, atomics) is its own
//! affair, as it would be for a handler that returned early.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::proto::error::Rejection;
use crate::proto::jsonrpc::ErrorObject;

/// A handler panicked; the call it served has no outcome.
#[derive(Debug)]
pub(crate) struct Panicked;

impl Panicked {
    fn logged(payload: &(dyn Any + Send)) -> Panicked {
        let text = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(not text)");
        tracing::error!(
            panic = text,
            "a handler panicked; its call is answered with an internal error"
        );
        Panicked
    }

    /// What the caller is answered: the internal error, without the panic's text.
    pub(crate) fn to_error_object(&self) -> ErrorObject {
        Rejection::Internal.to_error_object()
    }
}

/// Run `f` (a handler's synchronous part), its panic caught.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Panicked> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| Panicked::logged(&*p))
}

/// `F`, each poll's panic caught: it then ends with [`Panicked`] and `F` is dropped at once
/// (a panicked future is never polled again; a poll after the end answers [`Panicked`]).
pub(crate) struct CatchUnwind<F: ?Sized>(Option<Pin<Box<F>>>);

impl<F: Future + ?Sized> CatchUnwind<F> {
    pub(crate) fn new(f: Pin<Box<F>>) -> CatchUnwind<F> {
        CatchUnwind(Some(f))
    }
}

impl<F: Future + ?Sized> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Panicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(f) = self.0.as_mut() else { return Poll::Ready(Err(Panicked)) };
        match catch(|| f.as_mut().poll(cx)) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(r)) => {
                self.0 = None;
                Poll::Ready(Ok(r))
            }
            Err(p) => {
                self.0 = None;
                Poll::Ready(Err(p))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll_once<F: Future + ?Sized>(f: &mut CatchUnwind<F>) -> Poll<Result<F::Output, Panicked>> {
        Pin::new(f).poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_panic_in_a_poll_ends_the_future_with_panicked_and_drops_it() {
        struct Dropped(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let guard = Dropped(std::sync::Arc::clone(&dropped));
        let mut yielded = false;
        let mut f = CatchUnwind::new(Box::pin(std::future::poll_fn(move |_| {
            let _held = &guard;
            if !yielded {
                yielded = true;
                return Poll::<()>::Pending;
            }
            panic!("bug")
        })));
        assert!(poll_once(&mut f).is_pending());
        assert!(matches!(poll_once(&mut f), Poll::Ready(Err(Panicked))));
        assert!(
            dropped.load(std::sync::atomic::Ordering::SeqCst),
            "dropped at once, not with the wrapper"
        );
        assert!(
            matches!(poll_once(&mut f), Poll::Ready(Err(Panicked))),
            "polled again: still ended"
        );
    }

    #[test]
    fn a_future_that_ends_normally_is_unchanged() {
        let mut f = CatchUnwind::new(Box::pin(async { 7 }));
        assert!(matches!(poll_once(&mut f), Poll::Ready(Ok(7))));
        assert!(catch(|| -> () { panic!("bug") }).is_err());
        assert_eq!(
            Panicked.to_error_object(),
            ErrorObject::new(crate::proto::jsonrpc::code::INTERNAL_ERROR, "Internal error")
        );
    }
}
