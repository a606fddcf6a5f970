//! Server-Sent Events: an encoder that produces whole pre-encoded frames, and an incremental
//! decoder that follows the WHATWG event-stream parsing rules. Pure; no I/O.

mod decode;
mod encode;

pub use decode::{Decoder, SseEvent};
pub use encode::{COMMENT_KEEPALIVE, data_frame, event_frame, priming_frame, retry_frame};
