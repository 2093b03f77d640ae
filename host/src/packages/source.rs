//! Reading what `install` is given: a `.wasm` file, a directory holding exactly one, or an
//! OCI image layout on disk whose manifest has one `application/wasm` layer (the shape
//! `wkg oci push` publishes, following the CNCF Wasm OCI artifact layout, stored on disk by
//! `oras copy --to-oci-layout` or `skopeo copy … oci:DIR`).
//!
//! Owns: the source kinds, size bounds, and checking every OCI blob against its digest and
//! size before it is used. Must not: load, compile or install anything.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::InstallError;

/// The largest component `install` accepts (the built-in drivers are under 2 MiB).
pub const MAX_COMPONENT_BYTES: u64 = 64 << 20;

/// The media type of a WebAssembly component layer in an OCI image.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// Largest OCI JSON document (index, manifest) read.
const MAX_OCI_JSON: u64 = 1 << 20;

/// A component read from a source.
pub(crate) struct Read {
    /// The component's bytes.
    pub bytes: Vec<u8>,
    /// What it was read from, for the lock file (`PATH`, `oci:PATH@sha256:…`).
    pub origin: String,
    /// Where a detached signature would sit (`FILE.sig`), if the source kind has one.
    pub signature_beside: Option<PathBuf>,
}

/// Read the component `path` names.
pub(crate) fn read(path: &Path) -> Result<Read, InstallError> {
    let meta = std::fs::metadata(path).map_err(|e| io(path, e))?;
    if meta.is_file() {
        return Ok(Read {
            bytes: read_bounded(path, MAX_COMPONENT_BYTES)?,
            origin: absolute(path),
            signature_beside: Some(sig_beside(path)),
        });
    }
    if !meta.is_dir() {
        return Err(bad(path, "neither a file nor a directory"));
    }
    if path.join("oci-layout").is_file() {
        return read_oci(path);
    }
    let mut wasm: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| io(path, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    match wasm.len() {
        1 => read(&wasm.remove(0)),
        0 => Err(bad(
            path,
            "holds no `.wasm` file and is not an OCI image layout (no `oci-layout`)",
        )),
        n => {
            wasm.sort();
            Err(bad(
                path,
                &format!(
                    "holds {n} `.wasm` files ({}); name the one to install",
                    wasm.iter()
                        .filter_map(|p| p.file_name())
                        .map(|n| n.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ))
        }
    }
}

fn sig_beside(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Layout {
    image_layout_version: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    schema_version: u32,
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
}

fn read_oci(dir: &Path) -> Result<Read, InstallError> {
    let layout: Layout = json(dir, &dir.join("oci-layout"))?;
    if layout.image_layout_version != "1.0.0" {
        return Err(bad(
            dir,
            &format!(
                "OCI image layout version {}; this host reads 1.0.0",
                layout.image_layout_version
            ),
        ));
    }
    let index: Index = json(dir, &dir.join("index.json"))?;
    if index.schema_version != 2 {
        return Err(bad(dir, "index.json: schemaVersion must be 2"));
    }
    let manifests: Vec<&Descriptor> = index
        .manifests
        .iter()
        .filter(|m| m.media_type == "application/vnd.oci.image.manifest.v1+json")
        .collect();
    let manifest = match manifests.as_slice() {
        [one] => *one,
        [] => return Err(bad(dir, "index.json lists no OCI image manifest")),
        more => {
            return Err(bad(
                dir,
                &format!(
                    "index.json lists {} image manifests; install one image at a time",
                    more.len()
                ),
            ));
        }
    };
    let bytes = blob(dir, manifest, MAX_OCI_JSON)?;
    let manifest_doc: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| bad(dir, &format!("manifest {}: {e}", manifest.digest)))?;
    if manifest_doc.schema_version != 2 {
        return Err(bad(dir, "the manifest's schemaVersion must be 2"));
    }
    let layers: Vec<&Descriptor> = manifest_doc
        .layers
        .iter()
        .filter(|l| l.media_type == WASM_LAYER_MEDIA_TYPE)
        .collect();
    let layer = match layers.as_slice() {
        [one] => *one,
        other => {
            return Err(bad(
                dir,
                &format!(
                    "the manifest has {} `{WASM_LAYER_MEDIA_TYPE}` layers; a driver image has exactly one",
                    other.len()
                ),
            ));
        }
    };
    let bytes = blob(dir, layer, MAX_COMPONENT_BYTES)?;
    Ok(Read {
        bytes,
        origin: format!("oci:{}@{}", absolute(dir), manifest.digest),
        signature_beside: None,
    })
}

/// A blob of the layout, checked against its descriptor's digest and size.
fn blob(dir: &Path, d: &Descriptor, max: u64) -> Result<Vec<u8>, InstallError> {
    let hex = d
        .digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            bad(
                dir,
                &format!("digest `{}` is not `sha256:` and 64 hex digits", d.digest),
            )
        })?;
    if d.size > max {
        return Err(bad(
            dir,
            &format!("blob {} is {} bytes; at most {max}", d.digest, d.size),
        ));
    }
    let path = dir.join("blobs").join("sha256").join(hex);
    let bytes = read_bounded(&path, max)?;
    if bytes.len() as u64 != d.size {
        return Err(bad(
            dir,
            &format!(
                "blob {} is {} bytes; its descriptor says {}",
                d.digest,
                bytes.len(),
                d.size
            ),
        ));
    }
    let actual = hex::encode(Sha256::digest(&bytes));
    if !actual.eq_ignore_ascii_case(hex) {
        return Err(bad(
            dir,
            &format!("blob {} has digest sha256:{actual}", d.digest),
        ));
    }
    Ok(bytes)
}

fn json<T: serde::de::DeserializeOwned>(dir: &Path, path: &Path) -> Result<T, InstallError> {
    let bytes = read_bounded(path, MAX_OCI_JSON)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        bad(
            dir,
            &format!(
                "{}: {e}",
                path.file_name().unwrap_or_default().to_string_lossy()
            ),
        )
    })
}

fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, InstallError> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| io(path, e))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io(path, e))?;
    if bytes.len() as u64 > max {
        return Err(bad(path, &format!("larger than {max} bytes")));
    }
    Ok(bytes)
}

fn io(path: &Path, source: std::io::Error) -> InstallError {
    InstallError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn bad(path: &Path, reason: &str) -> InstallError {
    InstallError::Source {
        path: path.display().to_string(),
        reason: reason.to_owned(),
    }
}
