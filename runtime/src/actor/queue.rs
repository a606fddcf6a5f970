//! A connection's write queue: the frames a stream's actor hands to its connection's body,
//! bounded by `sse.write_queue_frames` (a full queue detaches the slow reader, who resumes
//! from the window; see [`super::stream`]). One sender (the stream's actor; or a task that
//! waits for room instead: the follower of another host's stream, [`super::follow`], and a
//! 2026-07-28 `subscriptions/listen` stream, `crate::http::listen`), one receiver (the body);
//! either may live on another worker thread.
//!
//! Small while idle, and no allocation a frame: one allocation of 128 bytes when the queue
//! opens, the frame at the head of the queue kept in place, and a buffer for the others only
//! while more than one waits (a burst; given back once it drained, so an idle stream keeps
//! none). tokio's bounded channel, used before, held 1.5 KiB for every open stream from its
//! start: a channel struct of cache-padded counters (512 bytes) and a first block of 32 slots
//! (1,056), measured with heaptrack over 1,000 open GET streams
//! (`bench/results/issue23-2026-12-06-round16/`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The queue holds its bound: the reader is slow.
    Full,
    /// The body is gone (the client went away or the response ended).
    Closed,
}

struct Inner {
    /// The oldest frame waiting (a reader that keeps up never has more than this one).
    head: Option<Bytes>,
    /// The frames behind `head`, oldest first (empty, with no buffer, while `head` is `None`).
    rest: VecDeque<Bytes>,
    /// At most 2^20 (`sse.write_queue_frames`' limit): 32 bits keep the queue in jemalloc's
    /// 128-byte class.
    bound: u32,
    /// The body's task, waiting for a frame or the sender's end.
    waker: Option<Waker>,
    /// A sender's task waiting for room ([`QueueTx::send`]).
    room: Option<Waker>,
    sender_alive: bool,
    receiver_alive: bool,
}

/// The actor's end. The lock is held only to move a frame, a flag or a waker in or out:
/// nothing is woken under it (a waker may run its task's scheduler) and no frame or buffer is
/// dropped under it (a frame's drop may free its buffer); a waker [`park`] replaces is
/// dropped there, a count on its task.
pub(crate) struct QueueTx(Arc<Mutex<Inner>>);

/// The body's end (the same lock, the same rule).
pub(crate) struct QueueRx(Arc<Mutex<Inner>>);

/// A queue that holds at most `bound` frames (at least one).
pub(crate) fn write_queue(bound: usize) -> (QueueTx, QueueRx) {
    let inner = Arc::new(Mutex::new(Inner {
        head: None,
        rest: VecDeque::new(),
        bound: u32::try_from(bound.max(1)).unwrap_or(u32::MAX),
        waker: None,
        room: None,
        sender_alive: true,
        receiver_alive: true,
    }));
    (QueueTx(Arc::clone(&inner)), QueueRx(inner))
}

impl QueueTx {
    /// Queue `frame` for the body, unless the queue is full or the body is gone.
    pub(crate) fn try_send(&self, frame: Bytes) -> Result<(), Refused> {
        Self::push(self.0.lock(), frame)
    }

    /// Queue `frame`, waiting for room while the queue is full (a follower of another host's
    /// stream, whose reads wait on its reader); `Err(Refused::Closed)` once the body is gone.
    pub(crate) async fn send(&self, frame: Bytes) -> Result<(), Refused> {
        let mut frame = Some(frame);
        std::future::poll_fn(|cx| {
            let mut q = self.0.lock();
            if q.receiver_alive && q.full() {
                park(&mut q.room, cx);
                return Poll::Pending;
            }
            Poll::Ready(Self::push(q, frame.take().expect("not polled after it was ready")))
        })
        .await
    }

    /// Whether the body is gone.
    pub(crate) fn is_closed(&self) -> bool {
        !self.0.lock().receiver_alive
    }

    /// Ready once the body is gone (a task that waits for other work meanwhile; not while it
    /// also waits in [`Self::send`], whose place for a waker this shares).
    pub(crate) async fn closed(&self) {
        std::future::poll_fn(|cx| {
            let mut q = self.0.lock();
            if q.receiver_alive {
                park(&mut q.room, cx);
                return Poll::Pending;
            }
            Poll::Ready(())
        })
        .await;
    }

    fn push(mut q: MutexGuard<'_, Inner>, frame: Bytes) -> Result<(), Refused> {
        let refused = if !q.receiver_alive {
            Some(Refused::Closed)
        } else if q.full() {
            Some(Refused::Full)
        } else {
            None
        };
        if let Some(why) = refused {
            // The frame is dropped after the lock.
            drop(q);
            return Err(why);
        }
        if q.head.is_none() {
            q.head = Some(frame);
        } else {
            q.rest.push_back(frame);
        }
        let waker = q.waker.take();
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

impl Drop for QueueTx {
    /// The body ends once it has written what is queued.
    fn drop(&mut self) {
        let mut q = self.0.lock();
        q.sender_alive = false;
        let waker = q.waker.take();
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl QueueRx {
    /// The next frame; `None` once the sender is gone and every frame was taken.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut q = self.0.lock();
        if let Some(frame) = q.head.take() {
            q.head = q.rest.pop_front();
            let buffer =
                (q.rest.is_empty() && q.rest.capacity() > 0).then(|| std::mem::take(&mut q.rest));
            // Only a sender waiting for room cares that the queue left its bound.
            let room = (q.len() + 1 == q.bound()).then(|| q.room.take()).flatten();
            drop(q);
            drop(buffer);
            if let Some(w) = room {
                w.wake();
            }
            return Poll::Ready(Some(frame));
        }
        if !q.sender_alive {
            return Poll::Ready(None);
        }
        park(&mut q.waker, cx);
        Poll::Pending
    }
}

impl Drop for QueueRx {
    /// The sender's next frame is refused as closed; what waits is dropped now.
    fn drop(&mut self) {
        let mut q = self.0.lock();
        q.receiver_alive = false;
        let frames = (q.head.take(), std::mem::take(&mut q.rest));
        let (waker, room) = (q.waker.take(), q.room.take());
        drop(q);
        drop((frames, waker));
        if let Some(w) = room {
            w.wake();
        }
    }
}

impl Inner {
    fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    fn bound(&self) -> usize {
        usize::try_from(self.bound).unwrap_or(usize::MAX)
    }

    fn full(&self) -> bool {
        self.len() >= self.bound()
    }
}

/// Keep `cx`'s waker in `slot` (not cloned again for the task already there).
fn park(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    /// Counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A task's wake counter and its waker.
    fn task() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        (count, waker)
    }

    fn poll(rx: &mut QueueRx, count: &Arc<Count>) -> Poll<Option<Bytes>> {
        let waker = Waker::from(Arc::clone(count));
        rx.poll_recv(&mut Context::from_waker(&waker))
    }

    fn frame(n: u8) -> Bytes {
        Bytes::from(vec![n])
    }

    #[test]
    fn frames_arrive_in_order_and_the_bound_refuses_as_full() {
        let (tx, mut rx) = write_queue(2);
        let count = Arc::new(Count::default());
        assert_eq!(tx.try_send(frame(1)), Ok(()));
        assert_eq!(tx.try_send(frame(2)), Ok(()));
        assert_eq!(tx.try_send(frame(3)), Err(Refused::Full));
        assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(1))));
        assert_eq!(tx.try_send(frame(3)), Ok(()), "taking a frame makes room");
        assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(2))));
        assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(3))));
        assert_eq!(poll(&mut rx, &count), Poll::Pending);
    }

    #[test]
    fn a_waiting_body_is_woken_by_a_frame_and_by_the_senders_end() {
        let (tx, mut rx) = write_queue(4);
        let count = Arc::new(Count::default());
        assert_eq!(poll(&mut rx, &count), Poll::Pending);
        tx.try_send(frame(1)).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the frame wakes it");
        tx.try_send(frame(2)).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "no second wake before it polls again");
        assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(1))));
        assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(2))));
        assert_eq!(poll(&mut rx, &count), Poll::Pending);
        drop(tx);
        assert_eq!(count.0.load(Ordering::SeqCst), 2, "the sender's end wakes it");
        assert_eq!(poll(&mut rx, &count), Poll::Ready(None));
    }

    #[test]
    fn queued_frames_are_written_before_the_senders_end_ends_the_body() {
        let (tx, mut rx) = write_queue(4);
        let count = Arc::new(Count::default());
        tx.try_send(frame(1)).unwrap();
        drop(tx);
        assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(1))));
        assert_eq!(poll(&mut rx, &count), Poll::Ready(None));
    }

    #[test]
    fn a_gone_body_refuses_as_closed_and_drops_what_waited() {
        let (tx, rx) = write_queue(4);
        let waiting = frame(1);
        tx.try_send(waiting.clone()).unwrap();
        drop(rx);
        assert_eq!(tx.try_send(frame(2)), Err(Refused::Closed));
        assert!(waiting.is_unique(), "the queued copy was dropped with the body");
    }

    #[test]
    fn one_frame_at_a_time_takes_no_buffer_and_a_drained_burst_gives_its_own_back() {
        let (tx, mut rx) = write_queue(64);
        let count = Arc::new(Count::default());
        tx.try_send(frame(0)).unwrap();
        assert_eq!(rx.0.lock().rest.capacity(), 0, "one frame waits in place");
        assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(0))));
        for n in 0..32 {
            tx.try_send(frame(n)).unwrap();
        }
        assert!(rx.0.lock().rest.capacity() > 0, "a burst takes a buffer");
        for n in 0..32 {
            assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(n))));
        }
        assert_eq!(rx.0.lock().rest.capacity(), 0, "and gives it back once drained");
        tx.try_send(frame(1)).unwrap();
        tx.try_send(frame(2)).unwrap();
        assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(1))));
        assert_eq!(rx.0.lock().rest.capacity(), 0, "the last one behind moved to the head");
        assert_eq!(poll(&mut rx, &count), Poll::Ready(Some(frame(2))));
    }

    #[test]
    fn a_full_queue_whose_body_is_gone_refuses_as_closed() {
        let (tx, rx) = write_queue(1);
        tx.try_send(frame(1)).unwrap();
        assert_eq!(tx.try_send(frame(2)), Err(Refused::Full));
        drop(rx);
        assert_eq!(tx.try_send(frame(2)), Err(Refused::Closed));
    }

    #[test]
    fn taking_a_frame_wakes_a_sender_only_when_the_queue_was_full() {
        let (tx, mut rx) = write_queue(2);
        let body = Arc::new(Count::default());
        let (sender, waker) = task();
        let mut cx = Context::from_waker(&waker);
        // A task waiting for the body's end (a listen stream in its select) is not woken by
        // the frames the body takes.
        let mut closed = std::pin::pin!(tx.closed());
        assert_eq!(closed.as_mut().poll(&mut cx), Poll::Pending);
        tx.try_send(frame(1)).unwrap();
        assert_eq!(poll(&mut rx, &body), Poll::Ready(Some(frame(1))));
        assert_eq!(sender.0.load(Ordering::SeqCst), 0);
        tx.try_send(frame(2)).unwrap();
        tx.try_send(frame(3)).unwrap();
        assert_eq!(poll(&mut rx, &body), Poll::Ready(Some(frame(2))));
        assert_eq!(sender.0.load(Ordering::SeqCst), 1, "it left its bound: woken");
    }

    #[test]
    fn a_waiting_send_goes_on_when_the_body_takes_a_frame_or_is_gone() {
        let (tx, mut rx) = write_queue(1);
        let body = Arc::new(Count::default());
        let (sender, waker) = task();
        let mut cx = Context::from_waker(&waker);
        tx.try_send(frame(1)).unwrap();
        let mut send = std::pin::pin!(tx.send(frame(2)));
        assert_eq!(send.as_mut().poll(&mut cx), Poll::Pending, "full: it waits");
        assert_eq!(poll(&mut rx, &body), Poll::Ready(Some(frame(1))));
        assert_eq!(sender.0.load(Ordering::SeqCst), 1, "taking a frame wakes the sender");
        assert_eq!(send.as_mut().poll(&mut cx), Poll::Ready(Ok(())));
        assert_eq!(poll(&mut rx, &body), Poll::Ready(Some(frame(2))));

        tx.try_send(frame(3)).unwrap();
        let mut send = std::pin::pin!(tx.send(frame(4)));
        assert_eq!(send.as_mut().poll(&mut cx), Poll::Pending);
        assert!(!tx.is_closed());
        drop(rx);
        assert_eq!(sender.0.load(Ordering::SeqCst), 2, "the body's end wakes the sender");
        assert_eq!(send.as_mut().poll(&mut cx), Poll::Ready(Err(Refused::Closed)));
        assert!(tx.is_closed());
    }

    #[test]
    fn closed_is_ready_once_the_body_is_gone() {
        let (tx, rx) = write_queue(1);
        let (sender, waker) = task();
        let mut cx = Context::from_waker(&waker);
        let mut closed = std::pin::pin!(tx.closed());
        assert_eq!(closed.as_mut().poll(&mut cx), Poll::Pending);
        drop(rx);
        assert_eq!(sender.0.load(Ordering::SeqCst), 1, "the body's end wakes it");
        assert_eq!(closed.as_mut().poll(&mut cx), Poll::Ready(()));
    }

    #[test]
    fn a_zero_bound_still_passes_one_frame() {
        let (tx, _rx) = write_queue(0);
        assert_eq!(tx.try_send(frame(1)), Ok(()));
        assert_eq!(tx.try_send(frame(2)), Err(Refused::Full));
    }
}
