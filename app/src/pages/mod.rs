pub mod dead;
pub mod deliveries;
pub mod event;
pub mod overview;
pub mod sources;
