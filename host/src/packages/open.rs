//! [`Driver::open`] and [`Driver::reload`]: the two ways of loading a driver that reach the
//! driver store as well as files and built-in names. They live here, above `driver`, so the
//! driver module never depends on the store.

use crate::driver::{Driver, LoadedDrivers, Origin};
use crate::error::{Error, InstallError, LoadError};

use super::DriverStore;

impl Driver {
    /// Load by name or path: a value ending in `.wasm` or containing `/` is a file;
    /// `name@version` is that version of an installed driver (see [`DriverStore`], the
    /// user's store); a plain `name` is a built-in driver, else the highest installed version
    /// of that name.
    pub fn open(name_or_path: &str) -> Result<Driver, Error> {
        Self::open_sharing(name_or_path, None)
    }

    /// [`Driver::open`], sharing loads through `shared` (see [`LoadedDrivers`]).
    fn open_sharing(name_or_path: &str, shared: Option<&LoadedDrivers>) -> Result<Driver, Error> {
        if name_or_path.ends_with(".wasm") || name_or_path.contains('/') {
            return Self::from_file_sharing(
                std::path::Path::new(name_or_path),
                &crate::driver::LoadOptions::default(),
                shared,
            );
        }
        if name_or_path.contains('@') {
            return DriverStore::user()?.open(name_or_path);
        }
        match Self::builtin_sharing(name_or_path, shared) {
            Err(Error::Load(LoadError::UnknownDriver { name, searched })) => {
                let Ok(store) = DriverStore::user() else {
                    return Err(Error::Load(LoadError::UnknownDriver { name, searched }));
                };
                match store.open(name_or_path) {
                    Err(Error::Install(InstallError::NotInstalled { .. })) => {
                        Err(Error::Load(LoadError::UnknownDriver {
                            name,
                            searched: format!(
                                "{searched}, and the driver store ({})",
                                store.lock_path().display()
                            ),
                        }))
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// Load this driver again from where it came from — the same file, the same built-in
    /// name, or the same installed name (then its highest installed version, so a newly
    /// installed version is picked up) — with the config this handle was given. This handle,
    /// and every agent, thread, stream and resident process started from it, keeps the
    /// component it loaded: a reload affects only what is started from the new handle. A
    /// driver loaded from bytes has nothing to re-read and is returned as it is.
    pub fn reload(&self) -> Result<Driver, Error> {
        let fresh = match self.origin() {
            Origin::Bytes => return Ok(self.clone()),
            Origin::File(path) => Driver::from_file(path)?,
            Origin::Builtin(name) => Driver::builtin(name)?,
            Origin::Installed { root, load, spec } => DriverStore::at(root)
                .load_options(load.clone())
                .open(spec)?,
        };
        fresh.with_config(self.given_config().clone())
    }
}

impl LoadedDrivers {
    /// Load by name or path as [`Driver::open`] does, sharing the component of an earlier
    /// load through `self` of the same, unchanged file (see [`LoadedDrivers`]).
    pub fn open(&self, name_or_path: &str) -> Result<Driver, Error> {
        Driver::open_sharing(name_or_path, Some(self))
    }
}
