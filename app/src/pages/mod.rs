pub mod audit;
pub mod dead;
pub mod deliveries;
pub mod event;
pub mod login;
pub mod overview;
pub mod sources;
pub mod tokens;
