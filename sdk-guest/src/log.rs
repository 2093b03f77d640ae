//! Levelled logging for drivers: through the host's `log` import inside a component, to
//! stderr when the driver runs natively (harness, unit tests).

use crate::LogLevel;

/// Write one log line.
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_family = "wasm")]
    crate::bindings::adaptor::driver::log::log(level, message);
    #[cfg(not(target_family = "wasm"))]
    eprintln!("[driver {level:?}] {message}");
}

/// Log at debug level.
pub fn debug(message: &str) {
    log(LogLevel::Debug, message);
}

/// Log at warn level.
pub fn warn(message: &str) {
    log(LogLevel::Warn, message);
}
