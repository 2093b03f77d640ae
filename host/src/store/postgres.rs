//! [`PostgresStore`] — being written (see the store issue); replaced wholesale.
use super::*;
/// PostgreSQL store.
#[derive(Debug)]
pub struct PostgresStore;
