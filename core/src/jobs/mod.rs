//! Background jobs every `serve` process runs beside its workers.

pub mod bulk;
pub mod queue;
pub mod retention;
pub mod rollup;
pub mod sessions;
pub mod unrecorded;
