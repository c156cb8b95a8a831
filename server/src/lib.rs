//! The podq server: catalog, store, scheduler and HTTP API.

pub mod catalog;
pub mod store;
