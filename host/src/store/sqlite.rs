//! [`SqliteStore`] — being written (see the store issue); replaced wholesale.
use super::*;
/// SQLite store.
#[derive(Debug)]
pub struct SqliteStore;
