//! Processing (spec section 5): workers lease due events, forward them to
//! their destination, and retry, complete or dead-letter them.

pub mod forward;
pub mod retry;
pub mod sync;
pub mod worker;
