//! A test-only driver whose descriptor is not deterministic (its version comes from a
//! randomly seeded hasher), violating DRV-02, and that declares no structured-output
//! mechanism. Otherwise it is the reference driver.

use std::hash::{BuildHasher, RandomState};

use adaptor_sdk::{ConfigError, Descriptor, Driver};
use reference_driver::{ReferenceDriver, ReferenceSession};

/// The unstable driver.
pub struct UnstableDriver;

impl Driver for UnstableDriver {
    type Session = ReferenceSession;

    fn describe() -> Descriptor {
        let mut d = ReferenceDriver::describe();
        d.name = "unstable".into();
        d.display_name = "Unstable descriptor".into();
        d.version = format!("0.1.{}", RandomState::new().hash_one(1u8) % 1_000_000);
        // No structured-output mechanism at all (the host must refuse schemas before launch).
        d.structured_output.native = false;
        d.structured_output.prompt_validate = false;
        d.structured_output.with_streaming = false;
        d.structured_output.native_with_approvals = false;
        d
    }

    fn validate_config(config: &serde_json::Value) -> Result<(), ConfigError> {
        ReferenceDriver::validate_config(config)
    }
}

#[cfg(target_family = "wasm")]
adaptor_sdk::export_driver!(UnstableDriver);
